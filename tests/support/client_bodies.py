"""Request bodies as the chat clients send them, built after their own source (abridged where only the guidance
text differs): Open WebUI's task templates (backend/open_webui/config.py, DEFAULT_*_PROMPT_TEMPLATE, rendered by
utils/task.py: `{{MESSAGES:END:n}}` becomes `ROLE: text` lines), its RAG template around an attached file
(DEFAULT_RAG_TEMPLATE with `<context><source id=...>` and, in older releases, `<user_query>`), LibreChat's title
requests (api/app/clients/prompts/titlePrompts.js `titleInstruction` in OpenAIClient.titleConvo; the agents'
`User: {input}` / `AI: {output}` convo), and Continue's chat request (`_convertArgs`: max_tokens, temperature,
stop, tools; an assistant turn of " ")."""

from __future__ import annotations

from typing import Any

OWUI_HEADERS = {
    "X-OpenWebUI-User-Name": "Ada",
    "X-OpenWebUI-User-Id": "u-1",
    "X-OpenWebUI-User-Email": "a@x.org",
    "X-OpenWebUI-User-Role": "user",
    "X-OpenWebUI-Chat-Id": "c-1",
}


def history(*turns: tuple[str, str]) -> str:
    """`{{MESSAGES:END:n}}` as Open WebUI renders it."""
    return "\n".join(f"{role.upper()}: {text}" for role, text in turns)


def owui_title(turns: str) -> str:
    return (
        "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n"
        "### Guidelines:\n- The title should clearly represent the main theme or subject of the conversation.\n"
        "- Write the title in the chat's primary language; default to English if multilingual.\n"
        '### Output:\nJSON format: { "title": "your concise title here" }\n### Examples:\n'
        '- { "title": "\U0001f4c9 Stock Market Trends" },\n- { "title": "Remote Work Productivity Tips" }\n'
        f"### Chat History:\n<chat_history>\n{turns}\n</chat_history>"
    )


def owui_tags(turns: str) -> str:
    return (
        "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 "
        "more specific subtopic tags.\n\n### Guidelines:\n- Start with high-level domains\n"
        '- If content is too short (less than 3 messages) or too diverse, use only ["General"]\n\n'
        '### Output:\nJSON format: { "tags": ["tag1", "tag2", "tag3"] }\n\n'
        f"### Chat History:\n<chat_history>\n{turns}\n</chat_history>"
    )


def owui_follow_ups(turns: str) -> str:
    return (
        "### Task:\nSuggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next "
        "in this conversation as a **user**, based on the chat history, to help continue or deepen the "
        "discussion.\n### Guidelines:\n- Write all follow-up questions from the user\u2019s point of view.\n"
        '- Response must be a JSON object with a "follow_ups" key containing an array of strings, no extra '
        'text or formatting.\n### Output:\nJSON format: { "follow_ups": ["Question 1?", "Question 2?", '
        f'"Question 3?"] }}\n### Chat History:\n<chat_history>\n{turns}\n</chat_history>'
    )


def owui_queries(turns: str) -> str:
    return (
        "### Task:\nAnalyze the chat history to determine the necessity of generating search queries, in the "
        "given language.\n\n### Guidelines:\n- Respond **EXCLUSIVELY** with a JSON object.\n- When generating "
        'search queries, respond in the format: { "queries": ["query1", "query2"] }\n\n### Output:\n'
        'Strictly return in JSON format: \n{\n  "queries": ["query1", "query2"]\n}\n\n'
        f"### Chat History:\n<chat_history>\n{turns}\n</chat_history>\n"
    )


def owui_autocomplete(turns: str, text: str) -> str:
    return (
        "### Task:\nYou are an autocompletion system. Continue the text in `<text>` based on the **completion "
        "type** in `<type>` and the given language.  \n\n### **Output Rules**:\n- Respond only in JSON format: "
        '`{ "text": "<your_completion>" }`.\n\n---\n### Context:\n<chat_history>\n'
        f"{turns}\n</chat_history>\n<type>General</type>  \n<text>{text}</text>  \n#### Output:\n"
    )


def owui_emoji(message: str) -> str:
    return (
        "Your task is to reflect the speaker's likely facial expression through a fitting emoji. Interpret "
        f"emotions from the message and reflect their facial expression using fitting, diverse emojis.\n\n"
        f"Message: ```{message}```"
    )


def owui_task_body(content: str, model: str = "ragvps") -> dict[str, Any]:
    """Open WebUI's task request (routers/tasks.py: one user message, not streamed; its metadata is dropped
    before an OpenAI connection is called)."""
    return {"model": model, "messages": [{"role": "user", "content": content}], "stream": False}


def owui_rag(context: str, question: str, name: str = "notes.txt", user_query: bool = False) -> str:
    """The last user message with Open WebUI's RAG template around an attached file's text."""
    template = (
        "### Task:\nRespond to the user query using the provided context, incorporating inline citations "
        "in the format [id] **only when the <source> tag includes an explicit id attribute** "
        '(e.g., <source id="1">).\n\n### Guidelines:\n- If you don\'t know the answer, clearly state '
        "that.\n- Do not use XML tags in your response.\n\n### Output:\nProvide a clear and direct response "
        "to the user's query, including inline citations in the format [id] only when the <source> tag "
        "with id attribute is present in the context.\n\n"
        f'<context>\n<source id="1" name="{name}">{context}</source>\n</context>\n'
    )
    if user_query:
        return template + f"\n<user_query>\n{question}\n</user_query>\n"
    return f"{question}\n{template}"  # add_or_update_user_message: the question, then the template


def owui_chat_body(messages: list[dict[str, Any]], model: str = "ragvps") -> dict[str, Any]:
    """Open WebUI's chat request to an OpenAI connection: streamed, usage asked for, the system prompt as a
    content part with cache_control (its Anthropic-style prompt caching)."""
    return {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}
                ],
            },
            *messages,
        ],
    }


def librechat_title(question: str, answer: str) -> dict[str, Any]:
    """OpenAIClient.titleConvo: one system message, the conversation quoted, the response as a JSON string."""
    import json

    instruction = (
        "a concise, 5-word-or-less title for the conversation, using its same language, with no "
        "punctuation. Apply title case conventions appropriate for the language. Never directly mention "
        'the language name or the word "title".Start the title with one emoji that fits the topic '
        "(REQUIRED), The emoji should help communicate the subject"
    )
    convo = f'||>User:\n"{question}"\n||>Response:\n"{json.dumps(answer)}"'
    return {
        "model": "ragvps",
        "temperature": 0.2,
        "max_tokens": 16,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "messages": [{"role": "system", "content": f"Please generate {instruction}\n\n{convo}\n\n||>Title:"}],
    }


def librechat_agents_title(question: str, answer: str) -> dict[str, Any]:
    """@librechat/agents' completion title: the prompt with `User: {input}` / `AI: {output}` as a user message."""
    content = (
        "Provide a concise, 5-word-or-less title for the conversation, using title case conventions. Only "
        f"return the title itself.\n\nConversation:\nUser: {question}\nAI: {answer}"
    )
    return {"model": "ragvps", "stream": False, "messages": [{"role": "user", "content": content}]}


CONTINUE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "builtin_read_file",
            "description": "Use this tool to read the contents of an existing file.",
            "parameters": {
                "type": "object",
                "required": ["filepath"],
                "properties": {"filepath": {"type": "string", "description": "The path of the file to read"}},
            },
        },
    }
]


def continue_agent(question: str) -> dict[str, Any]:
    """Continue's agent-mode request (core/llm/llms/OpenAI.ts _convertArgs): tools offered, not required; an
    earlier assistant turn of " " (its placeholder for an empty message)."""
    return {
        "model": "ragvps",
        "max_tokens": 4096,
        "temperature": 0.0,
        "stop": ["<|im_end|>"],
        "stream": True,
        "tools": CONTINUE_TOOLS,
        "messages": [
            {"role": "system", "content": "<important_rules>\n  You are in agent mode.\n</important_rules>"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": " "},
            {"role": "user", "content": question},
        ],
    }


def owui_tools(n: int = 10) -> list[dict[str, Any]]:
    """Open WebUI's built-in tools as it offers them with every chat message (utils/tools.py get_builtin_tools: 10 on
    an OpenAI connection, 36 on an Ollama one), in OpenAI's function shape; the descriptions abridged."""
    names = [
        "get_current_timestamp",
        "calculate_timestamp",
        "search_chats",
        "view_chat",
        "query_knowledge_bases",
        "search_knowledge_bases",
        "query_knowledge_files",
        "view_knowledge_file",
        "search_web",
        "fetch_url",
        "list_chat_files",
        "query_chat_files",
        "grep_chat_files",
        "view_file",
        "view_note",
        "search_notes",
        "write_note",
        "replace_note_content",
        "search_memories",
        "add_memory",
        "replace_memory_content",
        "delete_memory",
        "list_memories",
        "generate_image",
        "edit_image",
        "execute_code",
        "ask_user",
        "delegate_task",
        "timer",
        "kb_exec",
        "list_channels",
        "search_channels",
        "search_channel_messages",
        "view_channel_message",
        "view_channel_thread",
        "list_automations",
    ]
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"Open WebUI's built-in {name}.",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "What to look for."}},
                    "required": [],
                },
            },
        }
        for name in names[:n]
    ]


def owui_files(text: str, name: str = "notes.txt", file_id: str = "f-1") -> str:
    """A user message as Open WebUI sends it with a file attached and native function calling (utils/middleware.py
    add_file_context): the list of attached files before the text; its tasks quote the same in their history."""
    tag = f'<file type="file" id="{file_id}" url="/api/v1/files/{file_id}" content_type="text/plain" name="{name}"/>'
    return f"<attached_files>\n{tag}\n</attached_files>\n\n{text}"
