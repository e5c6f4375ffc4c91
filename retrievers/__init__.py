"""Systems that produce runs: BM25 (bm25s, rank_bm25), dense (sentence-transformers + Chroma), fusion."""
