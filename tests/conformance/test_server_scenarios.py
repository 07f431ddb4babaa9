"""The official MCP conformance suite's server scenarios against our three MCP servers over
streamable HTTP. One process per server serves every scenario, and all run concurrently; each
scenario is its own test, so a regression names the scenario. Scenarios that need the suite's
reference fixtures (tools, prompts and resources with fixed names) or a capability our servers do not
declare are skipped with that reason."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conformance import suite
from tests.conftest import fresh_database
from tests.mcp_servers import launch

pytestmark = suite.requires_suite

FIXTURES = "calls the suite's reference fixture {}, which only the suite's own test server has"
NOT_DECLARED = "the server does not declare the `{}` capability, so the method is rightly unknown to it"
NO_CLIENT_REQUESTS = "our servers never ask the client to {}"

SKIPPED = {
    "logging-set-level": NOT_DECLARED.format("logging"),
    "completion-complete": NOT_DECLARED.format("completions"),
    "resources-subscribe": NOT_DECLARED.format("resources.subscribe"),
    "resources-unsubscribe": NOT_DECLARED.format("resources.subscribe"),
    "tools-call-simple-text": FIXTURES.format("tool test_simple_text (against our servers it passes only because an unknown tool is an error result)"),
    "tools-call-image": FIXTURES.format("tool test_image_content"),
    "tools-call-audio": FIXTURES.format("tool test_audio_content"),
    "tools-call-embedded-resource": FIXTURES.format("tool test_embedded_resource"),
    "tools-call-mixed-content": FIXTURES.format("tool test_multiple_content_types"),
    "tools-call-with-logging": FIXTURES.format("tool test_tool_with_logging"),
    "tools-call-with-progress": FIXTURES.format("tool test_tool_with_progress"),
    "tools-call-sampling": NO_CLIENT_REQUESTS.format("sample a model") + "; " + FIXTURES.format("tool test_sampling"),
    "tools-call-elicitation": NO_CLIENT_REQUESTS.format("elicit input") + "; " + FIXTURES.format("tool test_elicitation"),
    "elicitation-sep1034-defaults": NO_CLIENT_REQUESTS.format("elicit input") + "; " + FIXTURES.format("tool test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": NO_CLIENT_REQUESTS.format("elicit input") + "; " + FIXTURES.format("tool test_elicitation_sep1330_enums"),
    "resources-read-text": FIXTURES.format("resource test://static-text"),
    "resources-read-binary": FIXTURES.format("resource test://static-binary"),
    "resources-templates-read": FIXTURES.format("resource template test://template/{id}/data"),
    "prompts-get-simple": FIXTURES.format("prompt test_simple_prompt"),
    "prompts-get-with-args": FIXTURES.format("prompt test_prompt_with_arguments"),
    "prompts-get-embedded-resource": FIXTURES.format("prompt test_prompt_with_embedded_resource"),
    "prompts-get-with-image": FIXTURES.format("prompt test_prompt_with_image"),
    "json-schema-2020-12": FIXTURES.format("tool json_schema_2020_12_tool"),
    "server-sse-polling": FIXTURES.format("tool test_reconnection") + " (and the package marks the scenario pending)",
}
RUN = [
    "server-initialize", "ping", "tools-list", "tools-call-error", "resources-list", "prompts-list",
    "server-sse-multiple-streams", "dns-rebinding-protection",
]
SCENARIOS = [*RUN, *SKIPPED]


SERVERS = ["workspace", "sandbox", "records"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, pg_admin_url: str) -> Iterator[dict[tuple[str, str], suite.Result]]:
    """Every scenario that runs, against all three servers at once: (server, scenario) -> result."""
    with (
        launch.http("workspace", "--root", str(tmp_path_factory.mktemp("workspace"))) as workspace,
        launch.http("sandbox", "--root", str(tmp_path_factory.mktemp("sandbox"))) as sandbox,
        fresh_database(pg_admin_url) as database,
        launch.http("records", "--database-url", database) as records,
    ):
        urls = dict(zip(SERVERS, [workspace, sandbox, records], strict=True))
        runs = [(server, scenario) for server in SERVERS for scenario in RUN]
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            done = pool.map(lambda run: suite.run("server", run[1], "--url", urls[run[0]]), runs)
            yield dict(zip(runs, done, strict=True))


def test_every_server_scenario_of_the_package_is_run_or_skipped_with_a_reason() -> None:
    assert sorted(suite.listed("server")) == sorted(SCENARIOS)


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("scenario", [
    *RUN, *(pytest.param(name, marks=pytest.mark.skip(reason=reason)) for name, reason in SKIPPED.items())
])
def test_scenario(server: str, scenario: str, results: dict[tuple[str, str], suite.Result]) -> None:
    result = results[server, scenario]
    assert result.checks and not result.failures, result.report()
