"""The agent corpus's nouns: the things instructions to a coding agent talk about.

`NOUNS` runs roughly from common to rare, since the corpus draws from it with falling weights. It
holds base forms, which `agent_vocabulary.plural` makes plural by rule; the nouns the rule gets
wrong are spelled out here, beside the list they come from.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPOUNDS",
    "IRREGULAR_PLURAL",
    "NOUNS",
    "UNCOUNTABLE",
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
