"""The long-running service. http.create_app mounts each door (api, documents, openai, ollama, mcp) behind
the gate (keys, people, limits, Host checks, the request and audit logs); shared holds what doors and gate share."""
