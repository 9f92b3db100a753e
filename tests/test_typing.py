"""The package's types as a user's type checker sees them: async twins are coroutines, the
compiled module's stub matches it, and the version is known."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import threadrecall

pytest.importorskip("mypy")

USER_SCRIPT = """
    import asyncio

    from threadrecall import Memory, RecallResult, Thread


    async def turn(memory: Memory) -> int:
        thread: Thread = await memory.acreate_thread("r1", thread_id="t1")
        saved = await memory.asave_messages([{"thread_id": thread.id, "role": "user", "content": "hi"}])
        result: RecallResult = await memory.arecall("t1", resource_id="r1", per_page=5)
        await memory.adelete_messages([m.id for m in saved])
        return result.total


    def main() -> None:
        with Memory() as memory:
            print(asyncio.run(turn(memory)), memory.recall("t1").total)
"""

FORGOTTEN_AWAIT = """
    from threadrecall import Memory


    async def turn(memory: Memory) -> int:
        result = memory.arecall("t1")
        return result.total
"""

WRONG_ARGUMENT = """
    from threadrecall import Memory


    async def turn(memory: Memory) -> None:
        await memory.arecall("t1", per_pge=5)
"""


def mypy(tmp_path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_a_user_script_with_awaited_twins_passes_strict_checking(tmp_path):
    result = mypy(tmp_path, USER_SCRIPT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_forgotten_await_is_flagged(tmp_path):
    result = mypy(tmp_path, FORGOTTEN_AWAIT)
    assert result.returncode == 1 and 'Coroutine[Any, Any, RecallResult]" has no attribute "total"' in result.stdout


def test_twins_keep_the_parameters(tmp_path):
    result = mypy(tmp_path, WRONG_ARGUMENT)
    assert result.returncode == 1 and '"per_pge"' in result.stdout


def test_the_core_stub_matches_the_compiled_module(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mypy.stubtest", "threadrecall._core"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_version_is_known():
    assert threadrecall.__version__ == threadrecall._core.__version__
    assert threadrecall.Memory.arecall.__name__ == "arecall"
    assert "recall" in threadrecall.Memory.arecall.__doc__
