"""The agent corpus's verbs: what instructions tell a coding agent to do.

`VERBS` runs roughly from common to rare, since the corpus draws from it with falling weights. It
holds base forms, which `agent_vocabulary` inflects by rule (third person, past, participle,
gerund); the verbs the rules get wrong are spelled out here, beside the list they come from.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DOUBLED",
    "IRREGULAR_PARTICIPLE",
    "IRREGULAR_PAST",
    "PARTICLE_VERBS",
    "VERBS",
]

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
