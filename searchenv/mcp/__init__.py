"""searchenv's engines as an MCP server: ``search`` and ``open`` over any configured retriever.

* :mod:`~searchenv.mcp.tools` — :class:`SearchTools`, the two tools as plain async methods over a retriever and its
  document opener, with the environment's own contract checks and clipping rule;
* :mod:`~searchenv.mcp.server` — :func:`build_server` (an ``mcp`` SDK ``MCPServer`` holding them) and
  :func:`run_server` (stdio, or streamable HTTP on 127.0.0.1 by default).

``searchenv mcp`` (:mod:`searchenv.cli.mcp`) is the command line. The ``mcp`` SDK is an optional dependency
(``pip install 'searchenv[mcp]'``), imported by :mod:`~searchenv.mcp.server` only.
"""

from __future__ import annotations

from searchenv.mcp.tools import SearchTools

__all__ = ["SearchTools"]
