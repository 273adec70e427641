"""The structure-augmented RAG systems the paper compares against (Tables 2, 3, 8, 9, 12).

RAPTOR is written here (`raptor`, on umap-learn and scikit-learn); LightRAG runs from
its own package (`lightrag_runner`); GraphRAG runs from its own package in its own
environment, as a subprocess (`graphrag_index` drives `graphrag_driver`). Each is one retriever registered in
`hipporag2.registry.RETRIEVERS`, so the pipeline, its checkpoints, the reader and the
report treat them like our own methods.
"""
