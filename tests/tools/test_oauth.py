"""OAuth for an HTTP MCP server against a local server that is its own authorization server (the
SDK's server-side auth helpers): its 401 says "authorization needed", never a generic error; the
run says what to do before a login, `boundloop auth` logs in
through the loopback callback, runs use and refresh the stored tokens, which are encrypted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import httpx2
import psycopg
import pytest
from cryptography.fernet import Fernet

from boundloop.checkpoints.pool import open_pool
from boundloop.tools import oauth
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.errors import ServerStartError

OAUTH_SERVER = str(Path(__file__).parent / "servers" / "oauth_server.py")
BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")


def _login(servers_file: Path, db_url: str) -> None:
    """`boundloop auth remote`, with a "browser" that opens the printed URL (the server approves at once)."""
    code, err = _try_login(servers_file, db_url)
    assert code == 0, err
    assert "authorized" in err


def _try_login(servers_file: Path, db_url: str) -> tuple[int, str]:
    """`boundloop auth remote` through the "browser"; its exit code and what it wrote after the URL."""
    process = subprocess.Popen([BOUNDLOOP, "auth", "remote", "--servers", str(servers_file), "--database-url", db_url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("http"):
            httpx2.get(line.strip(), follow_redirects=True, timeout=30)
            break
    out, err = process.communicate(timeout=60)
    return process.returncode, err


def _stored_logins(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'boundloop_mcp_oauth'").fetchone()
        if not row or not row[0]:
            return 0
        counted = conn.execute("SELECT count(*) FROM boundloop_mcp_oauth WHERE server = 'remote' AND tokens IS NOT NULL").fetchone()
        return int(counted[0]) if counted else 0


async def test_a_login_passes_the_issuer_the_authorization_server_sends(serve_http: Callable[..., str], db_url: str, log_dir: Path,
                                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that advertises `authorization_response_iss_parameter_supported` and sends its own
    issuer in the redirect (RFC 9207): the login succeeds, and a run uses its tokens."""
    monkeypatch.setenv(oauth.KEY_ENV, Fernet.generate_key().decode())
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": {"remote": {"url": serve_http(OAUTH_SERVER, "--iss"), "oauth": True}}}))
    _login(servers_file, db_url)
    pool = await open_pool(db_url)
    try:
        async with MCPBridge(load_servers(servers_file), log_dir=log_dir, auth=oauth.logins(pool)) as bridge:
            assert (await bridge.call("remote", "refreshes", {}, timeout_s=10)).text == "0"
    finally:
        await pool.close()


async def test_a_login_answered_with_another_issuer_is_refused_in_one_line(serve_http: Callable[..., str], db_url: str,
                                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redirect naming another authorization server's issuer (a mix-up attack) is refused before
    the code is exchanged: one line, a non-zero exit, no tokens stored."""
    monkeypatch.setenv(oauth.KEY_ENV, Fernet.generate_key().decode())
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": {"remote": {"url": serve_http(OAUTH_SERVER, "--wrong-iss"), "oauth": True}}}))
    code, err = _try_login(servers_file, db_url)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: OAuth login to 'remote' refused: Authorization response iss mismatch: https://attacker.example/ != http://127.0.0.1:")
    assert "nothing was stored" in lines[0]
    assert _stored_logins(db_url) == 0


async def test_login_then_runs_use_and_refresh_the_encrypted_tokens(serve_http: Callable[[str], str], db_url: str, log_dir: Path,
                                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(oauth.KEY_ENV, Fernet.generate_key().decode())
    url = serve_http(OAUTH_SERVER)
    with pytest.raises(ServerStartError) as refused:  # a 401 without "oauth": what to do, not a generic error
        async with MCPBridge(load_servers({"mcpServers": {"remote": {"url": url}}}), log_dir=log_dir):
            pass
    assert "authorization needed: the server answered HTTP 401" in str(refused.value)
    assert "Server returned an error response" not in str(refused.value) and "boundloop auth remote" in str(refused.value)
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": {"remote": {"url": url, "oauth": True}}}))
    servers = load_servers(servers_file)
    pool = await open_pool(db_url)
    try:
        with pytest.raises(ServerStartError, match=r"authorization needed: run `boundloop auth remote`"):
            async with MCPBridge(servers, log_dir=log_dir, auth=oauth.logins(pool)):
                pass
        _login(servers_file, db_url)
        async with MCPBridge(servers, log_dir=log_dir, auth=oauth.logins(pool)) as bridge:
            assert (await bridge.call("remote", "refreshes", {}, timeout_s=10)).text == "0"
        await _expire_access_token(pool)
        async with MCPBridge(servers, log_dir=log_dir, auth=oauth.logins(pool)) as bridge:  # a later run: refreshes first
            assert (await bridge.call("remote", "refreshes", {}, timeout_s=10)).text == "1"
        with psycopg.connect(db_url) as conn:
            stored = bytes(conn.execute("SELECT tokens FROM boundloop_mcp_oauth WHERE server = 'remote'").fetchone()[0])
        assert b"access_token" not in stored and b"refresh_token" not in stored
    finally:
        await pool.close()


async def _expire_access_token(pool) -> None:
    """Let the stored access token run out now (the refresh token stays)."""
    vault = oauth.TokenVault(pool, "remote")
    tokens = await vault.get_tokens()
    assert tokens is not None and tokens.refresh_token
    await vault.set_tokens(tokens.model_copy(update={"expires_in": 0}))
