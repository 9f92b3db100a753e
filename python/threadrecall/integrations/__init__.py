"""Drop-in memory for agent frameworks, one module per framework.

Each module imports its framework, so import the one you use (``from
threadrecall.integrations.openai_agents import ThreadRecallSession``) after installing the
extra of the same name (``pip install 'threadrecall[openai-agents]'``).
"""
