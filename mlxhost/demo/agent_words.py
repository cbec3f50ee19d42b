"""The agent corpus's other English words: adjectives, adverbs, acronyms, subjects, set phrases,
Markdown headings and tags.

Nouns are in `agent_nouns` and verbs in `agent_verbs`; the words of code and the shell are in
`agent_code_words`. The adjectives, adverbs, acronyms and phrases run roughly from common to rare,
since the corpus draws from them with falling weights; the other lists are drawn from evenly, and
repeat an entry to make it commoner.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACRONYMS",
    "ADJECTIVES",
    "ADVERBS",
    "PHRASES",
    "SUBJECTS",
    "TAGS",
    "TOPICS",
]

ADJECTIVES: Final = (
    "relevant specific current existing new old absolute relative optional required available "
    "possible necessary important clear concise short long full empty single multiple several "
    "unique exact complete correct valid invalid safe destructive dangerous independent "
    "parallel sequential large small simple complex recent previous next first last same "
    "different other default local remote public private general explicit direct careful "
    "proactive helpful useful accurate appropriate interactive persistent temporary readable "
    "visible hidden open closed running pending completed failing passing broken missing "
    "unexpected unclear ambiguous reasonable minimal additional related similar whole entire "
    "original final initial structured plain raw formatted nested top-level underlying "
    "primary secondary internal external binary textual numeric literal regular non-trivial "
    "straightforward well-known common rare frequent consistent idiomatic clean read-only "
    "writable executable sensitive confidential malicious legitimate authorized allowed "
    "forbidden blocked approved rejected successful unsuccessful quick slow expensive cheap "
    "fast real actual good bad better best worse worst high low big little great own free "
    "true false able major sure whole easy hard early late ready strong likely less least "
    "certain fine wrong right main key major minor significant obvious apparent subtle "
    "concrete abstract generic specialized dedicated standalone built-in third-party "
    "upstream downstream mutable immutable stateful stateless synchronous asynchronous "
    "blocking non-blocking concurrent distributed atomic idempotent deterministic random "
    "stable flaky transient permanent durable ephemeral fresh stale outdated deprecated "
    "legacy modern compatible incompatible portable native foreign verbose quiet silent "
    "noisy detailed brief thorough exhaustive comprehensive partial incremental tentative "
    "definitive authoritative genuine verbatim literal faithful honest transparent "
    "autonomous manual automatic implicit conditional mandatory exclusive inclusive "
    "mutually independent dependent nearby distant wide narrow deep shallow heavy light "
    "safe unsafe risky harmless reversible irreversible recoverable unrecoverable "
    "successful failed canceled cancelled expired active inactive idle busy live dead "
    "empty non-empty blank null undefined unknown known unused unreachable redundant "
    "duplicate distinct identical equivalent equal unequal greater smaller longer shorter "
    "higher lower newer older earlier later recursive iterative lazy eager strict loose "
    "lenient robust fragile elegant ugly messy tidy neat readable unreadable surprising "
    "confusing misleading helpful harmful polite rude friendly professional casual formal "
    "technical non-technical human machine-readable human-readable plain-text rich "
    # Everyday English.
    "normal usual ordinary typical standard average regular routine everyday daily weekly "
    "monthly yearly annual hourly agnostic neutral objective subjective fair biased "
    "skeptical doubtful hopeful optimistic pessimistic realistic practical pragmatic "
    "educational informative instructive illustrative representative comparable relative "
    "hard soft firm solid liquid fluid rigid flexible elastic sturdy weak strong tough "
    "gentle harsh mild severe extreme moderate modest humble proud bold shy brave calm "
    "anxious nervous eager keen willing reluctant hesitant curious interested bored tired "
    "busy lazy active passive aggressive defensive offensive protective responsive "
    "sensitive aware conscious mindful thoughtful careless reckless cautious prudent wise "
    "smart clever bright brilliant dull sharp blunt precise vague fuzzy crisp concise "
    "wordy lengthy compact dense sparse thin thick fat slim lean rich poor cheap costly "
    "valuable worthless priceless useless pointless meaningful significant trivial minor "
    "crucial vital essential critical central core fundamental basic elementary advanced "
    "sophisticated primitive crude rough smooth polished refined raw fresh new novel "
    "original creative innovative conventional traditional classic vintage ancient "
    "current contemporary upcoming forthcoming imminent urgent pressing overdue timely "
    "prompt punctual delayed late early premature mature young old elderly senior junior "
    "longest shortest fastest slowest biggest smallest highest lowest easiest hardest "
    "cheapest simplest safest newest oldest latest nearest closest furthest deepest "
    "plain obvious evident visible invisible transparent opaque clear cloudy dark light "
    "bright dim pale vivid colorful grey gray black white red green blue yellow orange "
    "purple pink brown golden silver wooden metallic plastic glass paper digital virtual "
    "physical mental emotional social political economic financial legal medical "
    "scientific academic professional personal individual collective mutual shared "
    "common joint separate distinct discrete continuous constant variable fixed dynamic "
    "static flexible adjustable configurable customizable extensible scalable reusable "
    "durable invocable callable runnable testable searchable editable viewable usable "
    "uncached unresolved unused unknown unclear unsure unsafe unstable unsupported "
    "unexpected unnecessary unrelated unlimited unrestricted unauthorized unverified"
).split()

ADVERBS: Final = (
    "always never only also instead first then directly carefully immediately proactively "
    "explicitly already usually often generally typically exactly simply quickly clearly "
    "concisely still again together separately automatically manually actually really "
    "briefly fully partially properly correctly safely thoroughly sometimes rarely just "
    "even ever once now here there soon later otherwise anyway however therefore thus "
    "instead meanwhile afterwards beforehand especially specifically particularly mostly "
    "mainly largely entirely completely nearly almost quite rather very too enough "
    "genuinely truly faithfully verbatim literally roughly approximately permanently "
    "temporarily recursively silently quietly loudly visibly briefly eventually finally "
    "initially previously recently currently originally ideally preferably possibly "
    "probably certainly definitely obviously apparently clearly strictly loosely "
    "conceptually logically technically practically effectively efficiently reliably "
    "consistently independently concurrently sequentially incrementally interactively "
    "programmatically asynchronously synchronously transparently plainly durably newly "
    "visually barely hardly merely purely solely wholly fairly highly deeply widely "
    "closely nearly heavily lightly slightly greatly largely hugely vastly rapidly slowly "
    "gradually steadily suddenly instantly promptly eagerly lazily gently firmly tightly "
    "openly honestly frankly seriously literally actually basically essentially "
    "naturally normally ordinarily regularly routinely occasionally frequently constantly "
    "continuously repeatedly consistently reliably predictably unexpectedly surprisingly "
    "fortunately unfortunately hopefully thankfully luckily sadly oddly strangely "
    "interestingly importantly notably significantly substantially considerably "
    "relatively comparatively respectively accordingly consequently subsequently "
    "ultimately overall altogether anywhere everywhere somewhere nowhere elsewhere "
    "upfront ahead behind beneath above below nearby forward backward inside outside"
).split()

ACRONYMS: Final = (
    "ID API URL JSON HTTP CLI PR UI OS TODO CI SDK MCP LLM AI IDs URLs APIs PRs HTTPS PDF CSV HTML "
    "CSS SQL XML YAML TOML UTF-8 ASCII UUID ISO UTC GPU CPU RAM SSH TLS DNS IP TCP REPL IDE LSP AST "
    "README PATH HOME ENV EOF N/A OK FAQ TL;DR ASAP FYI WIP TBD CLAUDE.md AGENTS.md MEMORY.md "
    "SKILL.md GitHub GitLab npm Python TypeScript JavaScript Rust Go Node.js Markdown Git Bash "
    "Linux macOS Windows Docker Jupyter VS Code Chrome Claude Anthropic OpenAI Codex Opus Sonnet "
    "Haiku GPT Gemini Llama Qwen Mistral MLX"
).split()

SUBJECTS: Final = (
    "you", "you", "you", "you", "you", "the user", "the user", "the agent", "the tool", "this tool",
    "the model", "the system", "it", "it", "they", "we", "the assistant", "the command",
    "the result", "the output", "each subagent", "the harness", "the caller", "Claude", "Codex",
    "the reviewer", "the server", "the script", "the test", "nobody", "everyone", "someone",
)

# Collocations that instructions use constantly, and the contractions English writes.
PHRASES: Final = (
    "for example", "such as", "as well as", "at least", "instead of", "rather than",
    "in order to", "make sure", "as soon as", "at the same time", "in the future",
    "if possible", "when possible", "by default", "in general", "in particular",
    "as needed", "if needed", "if necessary", "unless otherwise specified", "if any",
    "at once", "in parallel", "one at a time", "in the background", "on the other hand",
    "the current working directory", "the user's request", "the user's intent",
    "the rest of the", "the following", "the previous", "the next", "the end of",
    "the beginning of", "a new", "more than", "less than", "up to", "no more than",
    "do not", "does not", "don't", "can't", "won't", "isn't", "aren't", "it's", "you're",
    "you'll", "you've", "that's", "there's", "let's", "doesn't", "didn't", "shouldn't",
    "wouldn't", "haven't", "hasn't", "we're", "they're", "I'm", "I'll", "what's",
    "is not", "are not", "will be", "has been", "have been", "can be", "should be",
    "must be", "may be", "would be", "is a", "is the", "of the", "in the", "to the", "on the",
    "for the", "with the", "from the", "by the", "at the", "and the", "that the", "if the",
    "when the", "use the", "run the", "read the", "edit the", "call the", "ask the user",
    "tell the user", "the user asks", "the user wants", "you can", "you should", "you must",
    "you need to", "you may", "you will", "you are", "if you", "when you", "before you",
    "after you", "so that", "even if", "only if", "as if", "whether or not", "and then",
    "and/or", "e.g.", "i.e.", "etc.", "vs.", "a lot of", "a few", "a little", "each other",
    "one another", "in other words", "that is", "in this case", "in that case", "in most cases",
    "for instance", "according to", "due to", "because of", "based on", "in place of",
    "with respect to", "in addition", "as a result", "on top of", "at any point",
    "at the end", "at the start", "from now on", "so far", "right now", "as long as",
    "as much as", "as many as", "no longer", "not yet", "not only", "but also", "either way",
    "at all", "not at all",
)

TOPICS: Final = (
    "Overview", "Usage", "Usage notes", "Guidelines", "Instructions", "Examples", "Notes",
    "Important", "Rules", "Tone and style", "Doing tasks", "Tool usage", "Safety",
    "Git", "Committing changes", "Creating pull requests", "Testing", "Environment",
    "Output format", "Formatting", "Planning", "Editing files", "Running commands",
    "Searching", "Memory", "Permissions", "Sandboxing", "Final answer", "Progress updates",
    "Code review", "Task management", "Security", "When to use", "When not to use",
    "Parameters", "Returns", "Errors", "Background", "Context", "Responsibilities",
    "Communication", "Validation", "Troubleshooting", "Configuration", "Best practices",
    "Scope", "Limitations", "Workflow", "Phases", "How it works", "What to report",
    "Presenting your work", "Style", "Conventions", "Dependencies", "Verification",
)

# XML-like tags that instructions wrap examples and context in.
TAGS: Final = (
    "example", "examples", "reasoning", "commentary", "system-reminder", "env", "context",
    "instructions", "user_instructions", "environment_context", "cwd", "shell", "approval_policy",
    "sandbox_mode", "network_access", "good-example", "bad-example", "task", "result", "output",
    "error", "file", "files", "tool_result", "function_results", "thinking", "summary", "note",
    "user", "assistant", "response", "query", "document", "source", "details", "item",
)
