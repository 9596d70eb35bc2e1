"""The native BM25 engine: bit-packed block postings on disk (:mod:`.postings`) in the layout of
:mod:`.index_format`, built in bounded memory by worker processes (:mod:`.token_table`, :mod:`.segments`,
:mod:`.build`) and searched by numba MaxScore kernels (:mod:`.search`) through a memory-mapped term dictionary
(:mod:`.term_lookup`)."""
