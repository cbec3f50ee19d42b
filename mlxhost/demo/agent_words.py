"""Word lists for the agent corpus: the English of instructions, and the words of code and the shell.

Each list runs roughly from common to rare, since the corpus draws from it with falling weights.
Nouns and verbs are base forms (`agent_corpus` inflects them); the irregular forms are spelled out.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ABBREVIATIONS",
    "ACRONYMS",
    "ADJECTIVES",
    "ADVERBS",
    "COMPOUNDS",
    "DIRECTORIES",
    "DOUBLED",
    "EXTENSIONS",
    "IRREGULAR_PARTICIPLE",
    "IRREGULAR_PAST",
    "IRREGULAR_PLURAL",
    "NOUNS",
    "PARTICLE_VERBS",
    "PHRASES",
    "PROGRAMS",
    "PYTHON_TYPES",
    "SUBJECTS",
    "TAGS",
    "TOPICS",
    "TS_TYPES",
    "UNCOUNTABLE",
    "VERBS",
]

NOUNS: Final = (
    # Common in instructions to an agent.
    "file user tool command task code change test directory path repository branch commit message "
    "output input error result function class method module package project workspace session "
    "agent model request response prompt context instruction parameter argument value string "
    "number list array object field schema type name description content line text pattern query "
    "search match server process shell terminal environment variable configuration setting "
    "permission approval sandbox network access issue bug feature plan step item status state "
    "memory document example reference link page image screenshot notebook cell edit diff patch "
    "log history timeout limit offset range key option flag mode format summary report answer "
    "question rule behavior style convention library framework endpoint client token job hook "
    "skill plugin system assistant conversation turn reply call operation action workflow script "
    "program source target destination location folder filename extension word character space "
    "time way thing part case point group area work week fact hand world kind end member idea "
    "body level reason moment view difference building form event matter situation cost piece "
    "information data detail note warning failure success progress todo subtask subagent child "
    "parent root node tree graph layer scope block section paragraph sentence heading title label "
    "tag attribute property entry mapping dictionary set tuple integer boolean float default "
    "minimum maximum length size count total index position start beginning middle chunk batch "
    "category sort order sequence pipeline stage artifact cache snapshot backup copy version "
    "specification guideline policy safety risk harm security vulnerability attack knowledge "
    "ability date day hour minute second year month today tomorrow yesterday "
    # Software and the machine it runs on.
    "indentation comment docstring signature definition declaration import export interface "
    "component service handler callback queue worker thread update release check lint formatter "
    "compiler runtime interpreter editor browser website domain address header body payload "
    "record table row column database migration secret credential password account owner author "
    "reviewer team person developer engineer maintainer contributor customer problem solution "
    "approach strategy goal requirement constraint assumption decision fix regression crash "
    "exception traceback stack frame trace debugger breakpoint profiler benchmark metric "
    "measurement latency throughput bandwidth memory disk storage volume mount container image "
    "cluster node pod deployment instance region zone host port socket connection protocol "
    "certificate key encryption hash signature checksum digest algorithm structure array buffer "
    "stream channel pipe signal event loop coroutine promise future task scheduler timer clock "
    "deadline budget quota limit threshold ceiling floor boundary edge corner condition branch "
    "loop iteration recursion closure lambda decorator generator iterator comprehension "
    "expression statement operator operand literal identifier keyword namespace package "
    "dependency requirement manifest lockfile registry mirror proxy gateway router controller "
    "view template layout style theme color font icon button menu dialog modal panel tab window "
    "screen display terminal console prompt cursor selection clipboard keyboard mouse shortcut "
    "notification alert badge spinner indicator progress bar toast banner tooltip placeholder "
    "widget element tree document fragment sibling ancestor descendant attribute selector "
    "query mutation subscription resolver schema type union enum interface generic constraint "
    "annotation hint stub mock fake fixture spy assertion expectation coverage suite case "
    "scenario harness runner reporter snapshot golden baseline tolerance flake retry backoff "
    "worktree checkout clone fork remote origin upstream downstream tip head base ancestor "
    "merge rebase conflict hunk blame stash tag revision changelog readme license contributor "
    "issue ticket milestone label assignee comment thread review approval pull-request "
    "repo monorepo workspace subdirectory subfolder parent home root cwd tmp symlink glob "
    "wildcard regex expression substring prefix suffix delimiter separator whitespace newline "
    "tab quote backtick bracket brace parenthesis slash backslash colon semicolon comma period "
    "dash hyphen underscore asterisk ampersand pipe caret tilde percent dollar hash sign "
    "encoding unicode ascii byte bit emoji character letter digit uppercase lowercase case "
    # Thinking, talking and working together.
    "thought reasoning judgment intent purpose meaning sense opinion preference tone voice "
    "audience reader listener speaker writer author partner colleague collaborator stakeholder "
    "expert beginner novice user-facing surprise confusion frustration concern doubt confidence "
    "certainty uncertainty evidence proof claim argument conclusion finding observation insight "
    "hypothesis experiment trial attempt mistake error slip typo oversight omission shortcut "
    "workaround hack trick tip advice recommendation suggestion proposal alternative option "
    "choice tradeoff trade-off benefit drawback downside upside advantage disadvantage impact "
    "effect consequence side-effect outcome verdict score grade rating priority severity "
    "urgency importance relevance quality correctness completeness clarity brevity simplicity "
    "complexity consistency reliability stability performance efficiency speed accuracy "
    "precision recall scale usability accessibility readability maintainability portability "
    "compatibility security privacy integrity availability durability ownership responsibility "
    "accountability transparency honesty trust respect autonomy initiative discretion caution "
    "care attention focus effort energy patience persistence curiosity creativity "
    "phase round cycle pass sweep wave tier stage milestone checkpoint handoff kickoff "
    "standup meeting call chat email inbox thread channel calendar schedule agenda minutes "
    "notes draft outline sketch proposal spec design doc rfc memo brief summary recap digest "
    "overview introduction background motivation context scope non-goal goal objective "
    "deliverable estimate timeline roadmap backlog sprint ticket story epic bug chore "
    "organization company business product customer vendor partner market price plan tier "
    "subscription license contract agreement term condition law regulation compliance audit "
    # Everyday English, which instructions borrow from all the time.
    "lever knob switch dial gauge meter ruler scale balance weight load burden cost price fee "
    "vote poll survey census sample population crowd audience group crew squad fleet herd "
    "angle altitude height depth width breadth distance direction path route road street map "
    "lens mirror window door gate wall fence bridge tunnel pipe wire cable cord chord string "
    "thread needle knot loop ring circle square triangle line curve shape pattern outline "
    "surface texture color shade tone sound noise silence voice word phrase sentence story "
    "plot character scene chapter volume book page cover spine margin footnote appendix "
    "glossary index catalog inventory stock supply demand offer deal bargain trade exchange "
    "replacement substitute successor predecessor ancestor heir owner tenant guest host "
    "visitor stranger friend neighbor teammate partner rival competitor opponent enemy ally "
    "skeptic critic fan supporter follower leader boss manager lead director chief head "
    "training lesson course class lecture exercise drill practice habit routine ritual "
    "custom tradition culture language dialect accent grammar syntax semantics vocabulary "
    "spelling punctuation emphasis nuance tone mood attitude stance perspective lens frame "
    "altitude overview bird's-eye zoom detail close-up glimpse preview peek sneak hint clue "
    "signal sign symptom trace mark stamp seal badge token ticket pass permit license "
    "transcript recording tape video audio photo picture drawing diagram chart figure "
    "table spreadsheet worksheet form survey questionnaire checklist template boilerplate "
    "wake wakeup alarm reminder timer cron interval tick beat pulse heartbeat rhythm tempo "
    "flow stream current tide wave ripple splash drop drip leak flood overflow spill "
    "effort labor work toil grind push drive energy fuel power force strength muscle "
    "weakness flaw defect fault blame credit praise reward penalty punishment fine bonus "
    "gain loss profit margin surplus deficit debt loan credit interest return yield "
    "dimension axis aspect facet angle side face edge rim border frontier horizon sky "
    "ground earth soil rock stone sand dust dirt mud water fire air smoke steam gas fog "
    "weather climate season spring summer autumn fall winter morning noon afternoon "
    "evening night midnight dawn dusk weekday weekend holiday vacation trip journey tour "
    "mission quest adventure venture campaign operation project program initiative drive "
    "research study survey review analysis investigation inquiry exploration discovery "
    "invention innovation creation production construction assembly installation "
    "implementation execution performance delivery shipment arrival departure exit "
    "entrance gateway portal door threshold doorway hallway corridor room office desk "
    "shelf drawer box crate package parcel envelope letter note memo card sheet slip "
    "roll reel spool coil spring clip pin nail screw bolt nut hinge latch lock key "
    # Technical English.
    "metadata isolation orchestration verification invocation variant subject frontmatter "
    "timestamp millisecond microsecond nanosecond duration lifetime lifecycle precedence "
    "directive sentinel telemetry analytics instrumentation observability keybinding shortcut "
    "alias domain subdomain hostname username login logout signup onboarding teardown setup "
    "cleanup rollback rollout fallback callback webhook middleware plugin adapter wrapper "
    "helper utility factory builder singleton registry provider consumer producer publisher "
    "subscriber listener emitter dispatcher reducer selector store slice action effect saga "
    "whatever whichever whoever whenever wherever however "
    # The general English vocabulary, from A to Z.
    "ability abuse accident account achievement acid act activity actor ad addition adult "
    "advance advantage adventure advertisement affair age agency agent aid aim aircraft "
    "airport album alcohol amount analyst anger animal anniversary announcement answer "
    "anxiety apartment apology appeal appearance apple application appointment arrival art "
    "article aspect assessment asset assignment assistance association atmosphere attempt "
    "attitude authority award awareness baby bag ball band bank base basket bath battery "
    "battle bean bear beauty bed bedroom beer bell belt bench bicycle bill bird birth "
    "birthday bite blade blanket blood board boat bone border bottle bottom bowl brain "
    "brand bread breakfast breath brick brother budget bug bus bush butter cabinet cake "
    "camera camp campaign cancer candidate capacity capital captain car card career carpet "
    "cash cat cause ceiling celebration cell center century ceremony chain chair challenge "
    "champion championship chance channel chapter charge charity chart check cheese chemical "
    "chest chicken choice church cigarette circle citizen city claim classroom clock cloth "
    "clothes cloud club coach coast coat coffee coin collection college combination comedy "
    "command commission commitment committee communication community comparison competition "
    "complaint computer concept concert conference confidence conflict congress connection "
    "consequence consideration contact contest contribution conversation cook copy corner "
    "council counter country county courage course court cousin cow craft cream crime "
    "crisis criticism crop cross cry culture cup currency curtain curve cycle dad damage "
    "dance danger darkness daughter deal death debate decade deck defense degree delay "
    "delivery demand department deposit depression desert design desire desk dinner dirt "
    "disaster discipline discount discussion disease dish disk distance distribution "
    "district doctor dog dollar dot draft drama dream dress drink driver drug duty ear "
    "economy edge education egg election electricity emergency emotion emphasis employee "
    "employer employment energy engine entertainment enthusiasm equipment era essay estate "
    "exam examination excitement executive exercise exhibition existence expansion "
    "expense expert explanation expression extent eye fabric factor factory failure faith "
    "fall family fan farm farmer fashion father fault fear fee feedback feeling female "
    "fiction fight file film finance finger fish fishing flat flight floor flower fly food "
    "football force forest fortune foundation frame freedom friendship fruit fuel fun fund "
    "funeral furniture game gap garage garden gas gene generation gift girl glass glove "
    "god gold golf government governor grade grandmother grass guard guest guide guitar gun "
    "hair hall hat hate health hearing heart heat height hell help hero highway hill hint "
    "hobby hole holiday home honey hope horror horse hospital hotel house household housing "
    "husband ice identity illness imagination impression income independence industry "
    "inflation influence injury insect insight inspection inspiration institution "
    "instrument insurance intelligence intention interaction internet interview introduction "
    "invitation iron island item jacket joke journalist journey joy judge juice jump jury "
    "justice kid king kitchen knee lab lack lady lake language laugh lawyer leadership "
    "league leather lecture leg lesson letter lie lift limit lip literature loan lock lunch "
    "machine magazine mail maintenance male mall map marketing marriage master match "
    "material meal meat media medicine membership memory mention menu mess metal method "
    "midnight milk mind mine minister minority mission mistake mixture mom money monitor "
    "mood moon mother motor mountain mouth movie mud muscle museum music nail nation nature "
    "neck negotiation nerve network news newspaper night noise nose novel nurse object "
    "occasion ocean offer officer oil opening opinion opportunity opposition orange outcome "
    "oven owner pace pack pain paint painting pair panel paper parking participant partner "
    "party passage passenger passion patient peace pen penalty pension percentage perception "
    "period permission personality perspective phase philosophy phone photograph phrase "
    "physics piano picture pie pig pilot pipe pitch pizza plane planet plant plastic plate "
    "platform player pleasure pocket poem poet poetry police politics pollution pool "
    "popularity portion possession possibility post pot potato pound poverty practice "
    "prayer preference pregnancy preparation presence presentation president pressure "
    "pride priest prince principle print prison prize procedure production profession "
    "professor profit promise promotion proof protection protest psychology pub publication "
    "purchase quarter queen quote race radio rain ratio reaction reader reality reception "
    "recipe recognition recommendation reduction reflection relation relief religion "
    "rent repair representative reputation reserve resident resolution resort resource "
    "respect responsibility rest restaurant revenue revolution reward rhythm rice ride "
    "ring rise river road rock roof room rope round routine rule rush salad salary sale "
    "salt sand satisfaction sauce savings scheme scholar school science score screen sea "
    "seat secretary sector selection self sense series session sex shadow share sheet shell "
    "shelter shift ship shirt shock shoe shop shot shoulder shower sight signal silver "
    "singer sister site skin sky sleep slice smile smoke snow society software soil soldier "
    "song soul soup speech spirit sport spot square staff stage stair standard star statement "
    "station statue steel stick stomach stone store storm stranger strength stress strike "
    "student studio stuff substance suggestion suit sun supermarket supply surgery surprise "
    "survey survival suspect sweet symbol sympathy tale talent talk tank tape taste tax tea "
    "teaching tear technique technology teenager telephone television temperature tennis "
    "tension territory theater theme theory therapy thing threat ticket tip tongue tool "
    "tooth topic touch tour tourist tower town toy track tradition traffic train transfer "
    "transport trend trial trick trip trouble truck truth tube tune twin uncle union unit "
    "universe university vacation valley van vegetable vehicle version victim victory video "
    "village violence virus vision visit visitor volunteer wage walk war warning wash "
    "waste wealth weapon wedding weekend welcome wheel while whole width wife wind window "
    "wine wing winner winter witness woman wonder wood worker writer writing yard youth zone"
).split()

# Uncountable or already plural: left as they are.
UNCOUNTABLE: Final = frozenset(
    "information data knowledge safety security access feedback guidance advice evidence "
    "research progress software hardware equipment code content output input metadata "
    "documentation infrastructure whitespace work memory performance privacy".split()
)

IRREGULAR_PLURAL: Final = {
    "child": "children",
    "person": "people",
    "index": "indexes",
    "analysis": "analyses",
    "criterion": "criteria",
    "hypothesis": "hypotheses",
    "parenthesis": "parentheses",
    "thesis": "theses",
    "basis": "bases",
    "axis": "axes",
    "matrix": "matrices",
    "vertex": "vertices",
    "half": "halves",
    "leaf": "leaves",
    "life": "lives",
    "knife": "knives",
}

VERBS: Final = (
    "use read write edit create delete remove run execute search find check verify call invoke "
    "return provide include ensure avoid prefer follow ask tell explain describe show list open "
    "close update add fix test build install commit push pull review keep make get set start "
    "stop wait handle send receive report respond answer help need want try know see look "
    "understand consider mention note allow prevent require support contain match replace "
    "modify change save load parse format print capture launch spawn track mark complete "
    "finish plan break split combine group sort filter limit skip ignore retry continue "
    "cancel approve deny confirm fetch browse navigate inspect investigate explore analyze "
    "implement refactor rename move copy merge rebase stage restore revert reset apply "
    "generate render display exit fail succeed pass throw catch raise log trace debug "
    "deploy publish upload download sync schedule trigger watch monitor measure compare "
    "select choose decide determine infer assume expect specify define declare configure "
    "enable disable override extend wrap reuse share store cache persist clear summarize "
    "document annotate communicate announce grant block escalate interrupt resume pause "
    "proceed delegate coordinate validate sanitize escape quote encode decode serialize "
    "convert transform map reduce collect gather count begin give take put come go say think "
    "feel become leave mean let seem turn hold bring happen stand lose pay meet lead learn "
    "grow offer remember love appear buy serve die wonder expect reach kill remain suggest "
    "raise fall cut sit speak lie drive produce eat cover catch draw choose cause point "
    "listen realize place close involve increase develop sleep win argue reflect join "
    "introduce form represent benefit indicate prepare enter discuss improve recognize "
    "affect address achieve operate obtain attempt identify establish prove maintain "
    "occur emit omit submit refer prevent reject accept adopt adapt adjust align arrange "
    "assign attach authenticate authorize backfill balance bind bootstrap bump bundle "
    "calculate chain clarify clean clone collapse commit compile compose compress compute "
    "concatenate connect consolidate construct consume copy correct crash crawl customize "
    "deduplicate deprecate derive detect diagnose dispatch distinguish double-check drop "
    "dump duplicate edit elaborate embed emphasize emulate encrypt enforce enqueue enumerate "
    "evaluate examine exclude expand expire expose fill finalize flag flatten flush fold fork "
    "forward freeze gate guard guess hash highlight hint host hydrate import export index "
    "initialize inject insert instantiate integrate intercept iterate join justify kick lint "
    "lock lookup migrate minimize mirror mock mount mutate nest normalize notify observe "
    "obtain optimize organize output overwrite own package paginate parallelize paste patch "
    "ping pin pipe poll populate post predict prefix prepend preserve preview prioritize probe "
    "profile prompt propagate propose protect provision prune query queue quit rank reach "
    "reboot rebuild recompute reconcile record recover redact redirect reformat refresh "
    "register reinstall release reload relocate remind render reorder repair repeat rephrase "
    "replay reproduce request rerun resize resolve restart restrict retain retrieve reuse "
    "rewrite roll rotate route sample scaffold scan scope scroll seed separate ship shorten "
    "shut simplify simulate slice snapshot solve spell squash stabilize stream strip "
    "structure stub style subscribe substitute suppress surface swap switch synthesize "
    "tag tail teach terminate tighten time toggle tokenize touch translate traverse trim "
    "truncate tune type unblock uncomment undo uninstall unify unlock unpack unset unwrap "
    "upgrade verify version visit walk warn weigh whitelist widen yield zip "
    # Everyday English.
    "survive beat vote waste miss discard supersede amortize refute restore discover govern "
    "demonstrate abort vary watch force clarify babysit inherit sweep apply switch work "
    "research resume establish exist seem appear happen become belong depend consist "
    "involve concern matter differ relate respond react behave tend manage handle deal "
    "cope struggle fight compete win lose gain earn spend invest save afford owe borrow "
    "lend rent hire fire quit retire resign join leave enter arrive depart travel move "
    "shift swap trade exchange return deliver ship carry bring fetch lift raise lower drop "
    "push pull press squeeze stretch bend fold twist turn spin roll slide glide drift flow "
    "pour fill empty drain leak spill soak wash rinse dry wipe scrub polish shine glow "
    "burn melt freeze boil cook bake mix stir blend shake pour serve taste smell hear "
    "listen notice observe witness glance stare peek spot recognize identify name label "
    "classify categorize rate rank grade judge assess estimate guess predict forecast "
    "anticipate expect hope wish desire prefer like enjoy appreciate value cherish admire "
    "praise thank blame criticize complain object protest argue debate discuss talk chat "
    "speak say state declare claim assert insist admit confess deny refuse reject decline "
    "accept agree consent permit allow let enable empower encourage urge persuade convince "
    "remind warn alert advise recommend suggest propose offer invite welcome greet meet "
    "introduce present demonstrate illustrate depict portray represent symbolize signify "
    "imply suggest hint indicate reveal disclose expose hide conceal mask cover protect "
    "defend guard shield secure lock seal close shut open unlock unseal reopen release "
    "free liberate rescue save recover heal cure treat repair mend fix patch restore renew "
    "refresh revive revisit reconsider rethink reevaluate reassess reopen rework redo "
    "undo reverse invert flip toggle alternate rotate cycle loop repeat recur iterate "
    "sustain maintain preserve conserve protect retain keep hold grip grasp clutch seize "
    "grab snatch catch capture trap contain include embrace encompass cover span reach "
    "extend expand grow increase raise boost enhance improve upgrade advance progress "
    "develop evolve mature ripen age decline decrease reduce cut trim shrink narrow "
    "tighten loosen relax ease soften harden strengthen weaken damage harm hurt injure "
    "break crack split tear rip shred crush smash destroy ruin wreck spoil waste squander "
    "hedge balance weigh offset compensate counter resist oppose challenge question doubt "
    "suspect distrust trust believe rely count bet wager gamble risk dare venture attempt "
    "strive aim target intend mean plan design devise invent create craft build forge "
    "shape mold carve sculpt paint draw sketch outline draft compose author edit proofread"
).split()

# Verbs whose last consonant doubles before -ed and -ing (commit, committed, committing).
DOUBLED: Final = frozenset(
    "stop run set commit plan skip drop ship map wrap split get put begin submit refer prefer "
    "occur omit emit tag log pin cut hit let shut swap trim scan drag plug spot step strip "
    "admit control fit sit chat bin dump flag grab hop jot nag nod pat pad rub sum zip".split()
)

IRREGULAR_PAST: Final = {
    "run": "ran",
    "write": "wrote",
    "make": "made",
    "get": "got",
    "set": "set",
    "send": "sent",
    "tell": "told",
    "find": "found",
    "keep": "kept",
    "know": "knew",
    "see": "saw",
    "read": "read",
    "build": "built",
    "break": "broke",
    "choose": "chose",
    "throw": "threw",
    "catch": "caught",
    "begin": "began",
    "give": "gave",
    "take": "took",
    "split": "split",
    "put": "put",
    "come": "came",
    "go": "went",
    "say": "said",
    "think": "thought",
    "feel": "felt",
    "become": "became",
    "leave": "left",
    "mean": "meant",
    "let": "let",
    "hold": "held",
    "bring": "brought",
    "stand": "stood",
    "lose": "lost",
    "pay": "paid",
    "meet": "met",
    "lead": "led",
    "learn": "learned",
    "buy": "bought",
    "fall": "fell",
    "cut": "cut",
    "sit": "sat",
    "speak": "spoke",
    "lie": "lay",
    "drive": "drove",
    "eat": "ate",
    "draw": "drew",
    "sleep": "slept",
    "win": "won",
    "hit": "hit",
    "shut": "shut",
    "teach": "taught",
    "freeze": "froze",
    "spell": "spelled",
}

# Where the participle is not the past tense: it has been written, shown, done.
IRREGULAR_PARTICIPLE: Final = {
    "write": "written",
    "know": "known",
    "see": "seen",
    "break": "broken",
    "choose": "chosen",
    "throw": "thrown",
    "begin": "begun",
    "give": "given",
    "take": "taken",
    "go": "gone",
    "do": "done",
    "show": "shown",
    "hide": "hidden",
    "speak": "spoken",
    "drive": "driven",
    "eat": "eaten",
    "draw": "drawn",
    "freeze": "frozen",
    "fall": "fallen",
    "become": "become",
    "come": "come",
    "run": "run",
    "forget": "forgotten",
    "rewrite": "rewritten",
    "override": "overridden",
    "undo": "undone",
    "redo": "redone",
}

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

# What code shortens words to.
ABBREVIATIONS: Final = (
    "id ids by at ms sec max min num opts args kwargs ctx cfg env src dst tmp idx len str fn cb "
    "req res err msg url uri dir db auth meta info util utils spec impl init prev next curr temp "
    "obj val var param params attr attrs elem el btn nav img doc docs repo pkg lib bin cmd exe "
    "proc pid ttl eta qty pct avg sum stats def ref refs ptr buf cnt pos neg abs rel ok tx rx io "
    "async sync http api ui ux os fs"
).split()

SUBJECTS: Final = (
    "you", "you", "you", "you", "you", "the user", "the user", "the agent", "the tool", "this tool",
    "the model", "the system", "it", "it", "they", "we", "the assistant", "the command",
    "the result", "the output", "each subagent", "the harness", "the caller", "Claude", "Codex",
    "the reviewer", "the server", "the script", "the test", "nobody", "everyone", "someone",
)

# Nouns that go in pairs in technical English.
COMPOUNDS: Final = (
    "file path", "working directory", "tool call", "commit message", "pull request", "error message",
    "test suite", "code review", "system prompt", "user message", "search results", "command line",
    "line numbers", "file system", "source code", "exit code", "context window", "git repository",
    "code base", "shell command", "web page", "web search", "file name", "file contents",
    "line number", "output file", "input file", "config file", "log file", "test file", "test case",
    "unit tests", "integration tests", "edge cases", "use case", "use cases", "code path", "call site",
    "return value", "default value", "environment variable", "environment variables", "tool result",
    "tool results", "task list", "todo list", "status line", "progress update", "final answer",
    "final message", "user request", "user input", "user's request", "end user", "end of file",
    "start of the file", "top of the file", "bottom of the file", "time zone", "time limit",
    "rate limit", "token budget", "context budget", "cache hit", "cache miss", "data model",
    "data structure", "build system", "build step", "package manager", "lock file", "branch name",
    "commit hash", "main branch", "feature branch", "merge conflict", "code change", "code changes",
    "design doc", "API key", "API call", "HTTP request", "JSON object", "JSON schema", "key-value pairs",
    "type annotations", "type hints", "function call", "function name", "class name", "method name",
    "variable name", "import statement", "dry run", "follow-up question", "next step", "next steps",
    "first step", "last step", "root cause", "side effects", "best practice", "best practices",
    "trade-offs", "sub-agent", "background task", "background process", "long-running process",
)

# Verbs with their particles.
PARTICLE_VERBS: Final = (
    "look up", "set up", "clean up", "follow up", "figure out", "find out", "carry out", "point out",
    "back up", "roll back", "check out", "log in", "sign in", "write down", "break down", "shut down",
    "spin up", "wrap up", "hand off", "fall back", "run into", "dig into", "come back", "go back",
    "keep going", "pick up", "give up", "make up", "turn off", "turn on", "fill in", "leave out",
    "read through", "go through", "walk through", "look into", "look at", "look for", "ask for",
    "wait for", "search for", "account for", "rely on", "depend on", "focus on", "build on",
    "work on", "act on", "report back", "hold off", "narrow down", "scale up", "lay out", "sort out",
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

# Code and the shell.
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
