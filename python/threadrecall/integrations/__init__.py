"""Drop-in memory for Python agent frameworks, one module per framework.

Each module imports its framework, so it is imported only when used and needs the extra of
its name (``pip install 'threadrecall[langgraph]'``, ``'threadrecall[pydantic-ai]'``, ...).
"""
