"""The agent corpus's words of code and the shell: abbreviations, file extensions, directories,
shell commands, and Python and TypeScript types.

The corpus draws from each list evenly: a list repeats an entry to make it commoner.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ABBREVIATIONS",
    "DIRECTORIES",
    "EXTENSIONS",
    "PROGRAMS",
    "PYTHON_TYPES",
    "TS_TYPES",
]

# What code shortens words to.
ABBREVIATIONS: Final = (
    "id ids by at ms sec max min num opts args kwargs ctx cfg env src dst tmp idx len str fn cb "
    "req res err msg url uri dir db auth meta info util utils spec impl init prev next curr temp "
    "obj val var param params attr attrs elem el btn nav img doc docs repo pkg lib bin cmd exe "
    "proc pid ttl eta qty pct avg sum stats def ref refs ptr buf cnt pos neg abs rel ok tx rx io "
    "async sync http api ui ux os fs"
).split()

EXTENSIONS: Final = (
    "py", "py", "ts", "ts", "tsx", "js", "jsx", "json", "md", "md", "toml", "yaml", "yml", "txt",
    "rs", "go", "sh", "css", "html", "lock", "cfg", "ini", "sql", "c", "h", "cpp", "java", "rb",
    "ipynb", "log", "csv", "env", "mjs", "cjs", "svg", "png", "pdf", "xml", "swift", "kt",
)
DIRECTORIES: Final = (
    "src", "src", "tests", "test", "lib", "app", "apps", "packages", "docs", "scripts", "bin",
    "build", "dist", "node_modules", "components", "utils", "config", "api", "server", "client",
    "core", "internal", "cmd", "pkg", "models", "views", "routes", "hooks", "fixtures", "tmp",
    ".git", ".github", "workflows", ".vscode", ".config", ".cache", ".local", "share", "home",
    "user", "root", "usr", "var", "etc", "opt", "Users", "projects", "repo", "work", "main",
    "memory", "sessions", "logs", "assets", "public", "static", "migrations", "examples",
    "agents", "skills", "commands", "plugins", "worktrees", "target", "debug", "release",
    ".claude", ".codex", "projects", "claude", "codex", "anthropic", "openai",
)
PROGRAMS: Final = (
    "git status", "git diff", "git diff --staged", "git log --oneline -n 10", "git add",
    "git commit -m", "git checkout -b", "git switch", "git push -u origin", "git pull --rebase",
    "git rebase -i", "git show", "git stash", "git branch -a", "git rev-parse HEAD", "git blame",
    "git grep -n", "git worktree add", "git worktree list", "git fetch origin", "git reset --hard",
    "git restore --staged", "git config user.name", "gh pr create --title", "gh pr view",
    "gh issue list", "gh api", "ls", "ls -la", "ls -l", "cd", "cat", "head -n 20", "tail -n 50",
    "sed -n '1,80p'", "sed -i", "grep -rn", "grep -R", "rg", "rg -n", "rg --files", "find . -name",
    "find . -type f -name", "wc -l", "mkdir -p", "rm -rf", "rm", "cp -r", "mv", "touch",
    "chmod +x", "echo", "printf", "pwd", "which", "env", "export", "python", "python3",
    "python -m pytest -q", "pytest", "pytest -x -q", "pip install", "pip install -e .", "uv run",
    "uv pip install", "npm install", "npm run build", "npm test", "npm run lint",
    "npx tsc --noEmit", "npx prettier --write", "pnpm install", "yarn test", "node",
    "cargo build", "cargo test", "cargo clippy", "go test ./...", "go build ./...", "make",
    "make test", "docker build -t", "docker run --rm", "curl -s", "jq", "tree -L 2", "sort",
    "uniq -c", "xargs", "diff -u", "tar -xzf", "ssh", "kill", "ps aux", "timeout 60", "sleep 5",
    "apply_patch", "bash -lc", "zsh -lc", "open", "code", "vim", "less", "man", "true", "false",
)
PYTHON_TYPES: Final = (
    "str", "int", "float", "bool", "bytes", "None", "Path", "Any", "list[str]", "dict[str, Any]",
    "Sequence[int]", "Iterator[str]", "str | None", "tuple[int, ...]", "Callable[[], None]",
)
TS_TYPES: Final = (
    "string", "number", "boolean", "void", "unknown", "any", "string[]", "Promise<void>",
    "Record<string, unknown>", "Array<string>", "null", "undefined", "Promise<string>",
    "string | undefined", "number[]", "Map<string, number>",
)
