"""Scale the retrieval service out with Ray Serve: N replicas of the same app behind one HTTP endpoint.

uvicorn workers (``searchenv serve --workers N``) scale on one machine. When retrieval needs more than that —
a GPU per replica for dense search over wiki-18, or replicas on several nodes — Ray Serve runs the very app
of :func:`searchenv.retrievers.server.create_app` in each replica and routes ``/retrieve`` among them, so
clients and the wire format do not change. Each replica loads its own index and keeps its own cache and
micro-batcher. Needs ``pip install 'searchenv[ray]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchenv.retrievers.server import ServerConfig, create_app

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["build_application", "serve_with_ray"]


def build_application(config: ServerConfig, replicas: int = 1, num_cpus: float = 1.0, num_gpus: float = 0.0) -> Any:
    """A bound Ray Serve application of the retrieval app (pass it to ``ray.serve.run``).

    Args:
        config: what each replica serves (the corpus and index paths must exist on every node).
        replicas: number of replicas Ray places on the cluster.
        num_cpus, num_gpus: resources reserved per replica (e.g. ``num_gpus=1`` for a GPU faiss index).
    """
    from ray import serve

    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")

    def build() -> FastAPI:  # runs inside each replica, so the app (and its index) is never pickled
        return create_app(config)

    @serve.deployment(
        name="searchenv-retrieval",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
        max_ongoing_requests=256,
    )
    @serve.ingress(build)
    class RetrievalReplica:
        """One copy of the service; the ASGI app does all the work."""

    return RetrievalReplica.bind()


def serve_with_ray(
    config: ServerConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    address: str | None = None,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
) -> None:
    """Start (or join, with ``address="auto"`` or ``"ray://..."``) a Ray cluster and serve until interrupted."""
    import ray
    from ray import serve

    ray.init(address=address, ignore_reinit_error=True)
    serve.start(http_options={"host": host, "port": port})
    serve.run(
        build_application(config, replicas, num_cpus, num_gpus), name="searchenv", route_prefix="/", blocking=True
    )
