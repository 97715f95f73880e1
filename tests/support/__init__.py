"""What the tests share: servers that speak real protocols (Ollama, OpenAI-style LLMs, llama.cpp, OIDC), the served
ragvps in a process, the browser, generated hostile and Office files."""
