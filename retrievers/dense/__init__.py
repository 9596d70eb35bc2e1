"""The dense engines (E5 exact, HNSW, IVF-PQ): encoders (:mod:`.encoders`), the resumable corpus embedding
(:mod:`.embedding_cache`), faiss indexes (:mod:`.faiss_index`, :mod:`.ivfpq`), torch exact search
(:mod:`.torch_exact`) and the retriever that ties them together (:mod:`.retriever`). Imports torch and faiss
only when used."""
