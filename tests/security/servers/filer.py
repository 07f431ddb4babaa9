"""filer: a third-party-style file server whose tools take paths in the shapes other servers use —
`file_name`, `pathname`, a `uri`, a property of `format: uri`, a nested `options.path`, lists of
`files[].path` and `edits[].path`, a `spec.location` and `sources[].loc` that only a servers file can
declare, and a bare `q`. It marks nothing and follows every symlink: it would hand over whatever the
gateway lets through. Tests only.

`python filer.py --root DIR` serves stdio.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote, urlsplit

from mcp.server import MCPServer
from pydantic import BaseModel, Field


class Options(BaseModel):
    path: str
    encoding: str = "utf-8"


class FileRef(BaseModel):
    path: str


class Edit(BaseModel):
    path: str
    old: str
    new: str


class Spec(BaseModel):
    location: str
    content: str = ""


class Source(BaseModel):
    loc: str


def build_server(root: Path) -> MCPServer:
    mcp = MCPServer("filer")

    def at(text: str) -> Path:
        if text.startswith("file:"):
            text = unquote(urlsplit(text).path)
        return root / text

    def read(text: str) -> str:
        return at(text).read_text()

    @mcp.tool()
    def read_named(file_name: str) -> str:
        """Read a file by name."""
        return read(file_name)

    @mcp.tool()
    def read_pathname(pathname: str) -> str:
        """Read a file by path name."""
        return read(pathname)

    @mcp.tool()
    def read_uri(uri: str) -> str:
        """Read a file by file:// URI."""
        return read(uri)

    @mcp.tool()
    def read_ref(ref: Annotated[str, Field(json_schema_extra={"format": "uri-reference"})]) -> str:
        """Read a file by URI reference."""
        return read(unquote(ref))

    @mcp.tool()
    def read_options(options: Options) -> str:
        """Read the file the options name."""
        return read(options.path)

    @mcp.tool()
    def read_many(files: list[FileRef]) -> str:
        """Read several files."""
        return "\n".join(read(item.path) for item in files)

    @mcp.tool()
    def apply_edits(edits: list[Edit]) -> str:
        """Apply text edits to files; returns each file's text before the edit."""
        before = []
        for edit in edits:
            text = read(edit.path)
            before.append(text)
            at(edit.path).write_text(text.replace(edit.old, edit.new))
        return "\n".join(before)

    @mcp.tool()
    def put(spec: Spec) -> str:
        """Write a file at spec.location, making its directories."""
        target = at(spec.location)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(spec.content)
        return f"wrote {spec.location}"

    @mcp.tool()
    def grab(sources: list[Source]) -> str:
        """Read every source."""
        return "\n".join(read(source.loc) for source in sources)

    @mcp.tool()
    def fetch(q: str) -> str:
        """Look something up."""
        return read(q)

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    build_server(parser.parse_args().root).run()
