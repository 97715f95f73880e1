"""Generate stage: an answer with citations from the retrieved chunks.

`prompt` (the fixed layout), `budget` (what fits, counted with tiktoken), `citations` ([n] -> chunk),
`llm/` (one small httpx client per provider), `extractive` (the default with no LLM), `cache` (answers
in PostgreSQL), `registry` (generator kind -> implementation). The ask use case is the app
layer's (ragvps/app/ask.py).
"""
