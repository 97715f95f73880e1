-- vector_type 'bit': halfvec vectors with a binary-quantized HNSW index, re-ranked by exact cosine.
ALTER TABLE embedding_sets DROP CONSTRAINT embedding_sets_vector_type_check;
ALTER TABLE embedding_sets ADD CONSTRAINT embedding_sets_vector_type_check
    CHECK (vector_type IN ('vector', 'halfvec', 'bit'));
