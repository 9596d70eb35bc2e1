"""The OpenEnv Space's app: SearchQA served by searchenv on OpenEnv's own ``create_app``.

The options are ``SearchQAEnv`` arguments as JSON in ``SEARCHQA_OPTIONS`` (``{"split": "test", "protocol":
"tool-call"}``); without it, the embedded world's train split with BM25 and the Search-R1 protocol. ``main()`` is
what ``uv run server`` and ``python -m server.app`` start; the container runs uvicorn on ``server.app:app``.
"""

from __future__ import annotations

import json
import os

from searchenv.adapters.openenv import create_app

app = create_app(**json.loads(os.environ.get("SEARCHQA_OPTIONS", "{}")))


def main() -> None:
    """Serve ``app`` on 0.0.0.0:$PORT (8000 by default): inside a container or Space, not on a workstation."""
    import uvicorn

    uvicorn.run(app, host="0.0.0.0", port=int(os.environ.get("PORT", "8000")))


if __name__ == "__main__":
    main()
