-- What `ragvps eval` last measured with a gold file: its questions and the scores per search mode, so a bundle
-- carries them and `ragvps restore-check` can run the same questions on a restored copy and compare.
CREATE TABLE gold_questions (
    id       text PRIMARY KEY,
    question text NOT NULL,
    relevant jsonb NOT NULL,             -- document (path or doc id) -> relevance grade
    answer   text                        -- a quote the hit chunk must contain, or NULL
);

CREATE TABLE eval_scores (
    mode        text PRIMARY KEY,        -- vector | keyword | hybrid
    k           integer NOT NULL,
    depth       integer NOT NULL,
    recall      float8 NOT NULL,
    mrr         float8 NOT NULL,
    ndcg        float8 NOT NULL,
    questions   integer NOT NULL,
    measured_at timestamptz NOT NULL DEFAULT now()
);
