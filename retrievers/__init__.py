"""The system under test, every stage a system is made of: retrievers (BM25, dense, run files), query
rewriters, fusions, rerankers, and the chunkers and answer generators."""
