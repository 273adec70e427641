"""Query instructions for instruction-following encoders (SPEC §3). Passages, phrases
and facts are always encoded without an instruction."""

QUERY_TO_FACT = "Given a question, retrieve relevant triplet facts that matches this question."
QUERY_TO_PASSAGE = "Given a question, retrieve relevant documents that best answer the question."
QUERY_TO_PHRASE = "Given a question, retrieve relevant phrases that are mentioned in this question."
NER_TO_PHRASE = "Given a phrase, retrieve synonymous or relevant phrases that best match this phrase."
