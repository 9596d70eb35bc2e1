"""The embedded knowledge world: word lists (:mod:`.vocab`), fact tables (:mod:`.facts`), passages rendered from
them (:mod:`.passages`), and the generator that writes corpus and questions (:mod:`.generator`)."""

from searchenv.data.world.generator import SPLITS, World, default_world, generate_world, write_world

__all__ = ["SPLITS", "World", "default_world", "generate_world", "write_world"]
