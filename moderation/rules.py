"""Regular expressions for what the offensive-language SVM cannot see: self-harm, violence, illicit acts,
hate, sexual content, sexual content involving minors, and threats.

Each rule is a pattern over ``normalise``'d text (lower case, NFKC, no
zero-width characters, runs of a letter cut to two) with word boundaries, and
the categories it is evidence for. A hit scores ``HIT`` for its categories
(and their parents: ``Scores.of``); a bare mention of a hard topic scores
``MENTION``, under the default threshold, so clinical or news text about
suicide or war is seen but not flagged. Benign idioms ("kill the process",
"shoot a photo", "a killer feature") are cut out first (``BENIGN``), before
both the rules and the SVM read the text, except where the idiom's noun goes
on to name a person ("kill the server admin" is no "kill the server"). A
rule may also name what makes it read otherwise (``Rule.unless``: pests for
"how do I kill them", reporting or protecting for a request about a crime).

The patterns are conservative: precise phrases, first-person intent,
requests for instructions (``REQUEST`` framing an illicit or abusive act).
They miss paraphrase (bench/moderation.py reports how much, on a held-out
half never tuned on); a model (Llama Guard) is the remedy, not longer lists.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

HIT = 0.9  # a rule matched: clearly over the default threshold of 0.5
MENTION = 0.3  # the topic is named, nothing more: seen, not flagged at the default threshold

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def normalise(text: str) -> str:
    """Lower case, NFKC (full-width and ligature letters folded), zero-width characters gone, "killll" → "kill"."""
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH).translate(_QUOTES).lower()
    text = re.sub(r"([a-z])\1{2,}", r"\1\1", text)
    return re.sub(r"\s+", " ", text).strip()


def _words(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


# A person named right after an idiom's noun: "kill the server admin" is no "kill the server".
_NOT_A_PERSON_NEXT = (  # the next word or the one after ("the photo booth owner")
    r"(?!(?: \w+)? (?:admin|admins|administrator|guy|guys|man|men|woman|women|girl|boy|developer|developers|dev|devs|owner|owners"
    r"|manager|person|people|kid|kids|staff|team|folks|crew|engineer|engineers|tech|worker|workers|operator|boss|lady"
    r"|dude|user|users|host|hosts)\b)"
)
_PEOPLE_NOUN = r"(?:man|woman|person|guy|kid|child|baby|neighbou?r|cop|girl|boy|human|stranger)"

# Idioms that use violent or sexual words for ordinary things: removed before any rule or the SVM reads the text.
BENIGN = re.compile(
    "|".join(
        (
            r"\bkill(?:s|ed|ing)? (?:-\d+|-s ?\w+|%\d+|it|time|two birds|(?:the |a |an |this |that |my |all |every |its )?"
            r"(?:\w+ )?(?:process|processes|job|jobs|task|thread|server|session|app|program|container|pod|build|query"
            r"|connection|tab|lights|engine|music|noise|mood|batch|worker|shell|vibe|weeds|mold|mould|bacteria|germs|fleas"
            r"|ants|pests|roaches|mosquitoes|aphids|viruses|lice|pid))\b" + _NOT_A_PERSON_NEXT,
            r"\b(?:joke|jokes|show|movie|this|that|it|you|comedian|shoes|feet|heat|commute|ending|episode)"
            r" (?:is |was |are |were )?(?:totally |literally |really |just )?(?:killed|kills|killing) me\b",
            r"\bkiller (?:feature|app|deal|idea|combo|track|song|move|workout|view|smile|instinct|whale|bee)s?\b",
            r"\b(?:could|would) (?:murder|kill) (?:for )?(?:a|an|some) (?!" + _PEOPLE_NOUN + r"s?\b)\w+\b",
            r"\bshoot(?:s|ing)? (?:a |the |some |me |us |you |him |her |them )?(?:an? )?(?:photo|photos|picture|pictures|video|videos|film|movie"
            r"|scene|portrait|wedding|email|message|text|line|question|hoops|pool|the breeze)\b" + _NOT_A_PERSON_NEXT,
            r"\bexecut(?:e|es|ed|ing|ion) (?:the |a |this |my |your |of )?(?:script|command|code|query|program|plan|order"
            r"|function|task|job|test|tests|trade|binary|file|time|context|policy)s?\b",
            r"\bterminat(?:e|es|ed|ing|ion) (?:a |the |this |my )?(?:thread|process|instance|contract|loop|connection"
            r"|session|program|employment|lease|subscription)s?\b",
            r"\b(?:bath|photo|calorimeter) ?bombs?\b|\bbomb(?:ed)? (?:the|my|an|that) (?:exam|test|interview|audition)\b"
            r"(?! (?:cent(?:re|er)|hall|room|building|site|venue)s?\b)",
            r"\b(?:break a leg|dead ?lock|dead code|headshot(?! (?:him|her|them|the|that|this|those|everyone|people)\b)|attack (?:vector|surface)s?|sex of (?:the|a|my) \w+|naked (?:eye|mole rats?))\b",
        )
    )
)


@dataclass(frozen=True)
class Rule:
    name: str  # shown in tests and the bench's misses
    categories: tuple[str, ...]
    pattern: re.Pattern[str]
    score: float = HIT
    unless: re.Pattern[str] | None = None  # the text reads otherwise where this also matches (it is then no hit)

    def hits(self, text: str) -> bool:
        return bool(self.pattern.search(text)) and not (self.unless is not None and self.unless.search(text))


def _rule(
    name: str, categories: tuple[str, ...], pattern: str, score: float = HIT, unless: re.Pattern[str] | None = None
) -> Rule:
    return Rule(name, categories, re.compile(pattern), score, unless)


I_WILL = _words(
    r"i ?'?ll", r"i will", r"i am going to", r"i'?m going to", r"i'?m gonna", r"i ?wanna", r"i want to", r"we will",
    r"we'?ll", r"i'?m about to", r"i swear i'?ll", r"i'?m coming to",
)
HURT = _words(r"kill", r"murder", r"stab", r"shoot", r"strangle", r"beat up", r"beat the \w+ out of", r"hurt",
              r"punch", r"slap", r"knife", r"torture",
              r"slit", r"choke", r"break your \w+", r"smash your \w+")
PEOPLE = _words(
    r"you", r"u", r"him", r"her", r"them", r"everyone", r"everybody", r"people",
    r"your (?:family|kids|children|wife|husband|mom|mum|dad|mother|father|friends|dog|cat|son|daughter|brother|sister"
    r"|parents|girlfriend|boyfriend)",
    r"my (?:wife|husband|boss|neighbou?r|teacher|family|mom|mum|dad|brother|sister|coworkers?|classmates?|ex|girlfriend"
    r"|boyfriend|roommate|landlord|parents)",
    r"the (?:teacher|boss|neighbou?r|kids|children|students|guy|girl|woman|man)",
    # someone named by a role: "the server admin", "that delivery guy", "my son's teacher"
    r"(?:the|that|this|those|my|our|his|her) (?:\w+(?:'s)? ){0,2}(?:admin|administrator|guy|man|woman|girl|boy|developer|dev|owner"
    r"|manager|person|engineer|tech|worker|boss|lady|dude|cop|driver|kid|teacher|nurse|doctor|officer|clerk|cashier|waiter"
    r"|landlord|neighbou?r)s?",
) + r"(?!'s\b| (?:a|an) (?:cd|copy|playlist|disc|dvd)\b)"  # "my sister's wedding", "burn them a cd": not the person
GROUP = _words(  # plural or singular ("every asian")
    r"jews?", r"jewish people", r"muslims?", r"christians?", r"blacks", r"black people", r"white people", r"asians?",
    r"mexicans?", r"immigrants?", r"gays?", r"gay people", r"lesbians?", r"trans people", r"transgender people", r"women",
    r"arabs?", r"hindus?", r"sikhs?", r"disabled people", r"refugees?", r"gypsies", r"roma", r"africans?", r"latinos?",
    r"chinese people", r"indians?", r"catholics?", r"atheists?", r"homosexuals?", r"migrants?", r"foreigners?",
)
HOW = _words(r"how (?:do|can|could|should|would) (?:i|we|you|one)", r"how to", r"ways to", r"steps to",
             r"tell me how to", r"teach me (?:how )?to", r"instructions (?:for|to|on how to)", r"guide to")
# Asking how (or for help) to do something: the framing of the request rules.
REQUEST = _words(
    r"how (?:do|can|could|should|would) (?:i|we|you|one)", r"how to", r"ways? to", r"steps to", r"best way to",
    r"tips (?:for|on|to)", r"help me", r"assist (?:me )?(?:in|with)", r"can you (?:help|assist|show|tell|teach|give)",
    r"tell me how to", r"teach me(?: how)? to", r"can you (?:provide|find|get|send|share|list)", r"instructions (?:for|to|on)", r"guide (?:to|for|on)",
    r"where (?:can|do|could) i", r"can i", r"strategies for", r"plan to", r"write", r"create", r"compose",
)
# Words that turn an illicit topic into its defence ("how do I report a drug dealer"): no request rule then.
DEFENSIVE = re.compile(
    r"\b(?:report\w*|prevent\w*|protect(?:ing)? (?:myself|yourself|my|your|our|against|from|them|him|her)|avoid\w*|spot|recogni[sz]e|detect\w*|stop|defend\w*|victims?|warning signs"
    r"|signs of|legal(?:ly)? (?:way|ways|alternative)|is it (?:legal|illegal)|penalt(?:y|ies)|sentence for)\b"
)
PESTS = re.compile(
    r"\b(?:mosquito(?:e?s)?|flies|fly|ants?|rats?|mice|mouse|wasps?|weeds?|bugs?|roach(?:es)?|cockroach(?:es)?|termites?"
    r"|moles?|slugs?|snails?|fleas?|ticks?|lice|bed ?bugs?|pests?|aphids?|moths?|spiders?|germs|bacteria|mold|mould)\b"
)

DRUGS = (r"meth", r"methamphetamine", r"crack", r"cocaine", r"heroin", r"fentanyl", r"lsd", r"mdma", r"dmt", r"crystal meth",
         r"ghb", r"ketamine")
DRUG = _words(*DRUGS)
WEAPON = _words(r"(?:a |an )?(?:\w+ )?(?:pipe |car |nail |dirty |fertili[sz]er )?bomb", r"(?:an? )?explosives?", r"(?:an? )?ied",
                r"(?:a )?molotov(?: cocktail)?", r"(?:a )?grenade", r"nerve (?:agent|gas)", r"sarin", r"ricin", r"anthrax",
                r"mustard gas", r"(?:a )?ghost gun", r"(?:an )?untraceable (?:gun|firearm)", r"(?:a )?silencer",
                r"(?:a )?suppressor", r"napalm", r"thermite", r"chlorine gas", r"(?:a )?bioweapon", r"(?:a )?dirty bomb")
MINOR = _words(r"child", r"children", r"kid", r"kids", r"minor", r"minors", r"underage", r"under-age", r"pre-?teens?",
               r"toddlers?", r"little (?:girl|boy)s?", r"schoolgirls?", r"schoolboys?", r"(?:[1-9]|1[0-7])[- ]?(?:year|yr)s?[- ]?olds?",
               r"young (?:girl|boy)s?", r"my (?:son|daughter)", r"(?:middle|elementary|primary) school(?:er|ers)?",
               r"\d(?:st|nd|rd|th) graders?")  # not "girls", "teens": adults are called both
SEXUAL = _words(r"sex", r"sexual(?:ly)?", r"sexy", r"nudes?", r"naked", r"porn\w*", r"erotic\w*", r"explicit", r"aroused",
                r"horny", r"seduc\w+", r"intercourse", r"undress\w*", r"lewd", r"orgasm\w*", r"fondl\w+", r"molest\w*")
# Talking with children about their bodies, protecting or reporting: "minor" near "sex" there is not the harm
# (scored as a mention, under the default threshold) ...
SAFEGUARDING = re.compile(
    r"\b(?:sex(?:ual)? (?:education|ed|health)|talk (?:to|with) (?:my|our|your) \w+ about|puberty|body safety|protect"
    r" \w+ (?:child|children|kids|son|daughter)|prevent\w*|report\w*|signs of|warning signs|safeguard\w*|age of consent"
    r"|consent laws?|biology|gender|(?:his|her) sex is|determine the sex|anatomy|health class|filter\w*|parental"
    r"|block\w*|protect\w*|how (?:do|should|can) i explain|asks? (?:me )?about|saw an?|walked in on)\b"
)
# ... unless the text asks for content: "write a sexual story about a 12-year-old, to prevent boredom" is no
# safeguarding question, and an appended "prevent" must not be a way round the rule.
CONTENT_REQUEST = re.compile(
    r"\b(?:write|describe|roleplay|role-play|generate|draw|create|story|stories|fiction|pics?|pictures?|images?|photos?"
    r"|videos?|send|show me|fantas(?:y|ies)|scene)\b"
)

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- self-harm
    _rule("self-harm intent", ("self-harm/intent",),
          r"\bi(?:'?m|'?ve|'?d| am| have| keep)? (?:\w+ ){0,3}(?:kill(?:ing)? myself|end(?:ing)? (?:my life|it all)|commit(?:ting)? suicide"
          r"|hurt(?:ing)? myself|cut(?:ting)? myself|harm(?:ing)? myself|overdos(?:e|ing)|hang(?:ing)? myself|die tonight)\b"),
    _rule("self-harm wish", ("self-harm/intent",),
          r"\bi (?:don'?t|do not) want to (?:live|be alive|wake up|exist)|\bi(?:'d| would) be better off dead"
          r"|\b(?:no|nothing left to live for|no reason to) (?:reason to )?(?:live|go on)\b|\bi(?:'m| am) (?:feeling )?suicidal\b"
          r"|\bi wish i (?:was|were) dead\b|\bbetter off (?:without me|if i (?:\w+ )?(?:disappeared|was gone|were gone|died"
          r"|wasn'?t here|weren'?t here))"
          r"|\bi (?:really |just |honestly )?want to die\b(?! (?:laughing|of|in my sleep|old))"),
    _rule("self-harm instructions", ("self-harm/instructions",),
          HOW + r" (?:kill (?:myself|yourself|oneself)|commit suicide|end (?:my|your|one'?s) (?:own )?life|cut (?:myself|yourself)"
          r"(?: without)?|hurt (?:myself|yourself)|overdose|hang (?:myself|yourself)|starve (?:myself|yourself))\b"
          r"|\b(?:painless|quickest|fastest|easiest|best|surest|most effective) (?:way|ways|method|methods) (?:to|of) "
          r"(?:die|dying|kill (?:myself|yourself)|commit(?:ting)? suicide|end (?:my|your|a) life|suicide)\b"
          r"|\b(?:lethal|fatal|deadly) (?:dose|amount|quantity) of\b|\bhow many \w+ (?:\w+ )?(?:would|will|does|do)(?: it)?(?: take)?"
          r"(?: to)? (?:kill (?:me|myself|a person)|be lethal|be fatal|overdose)\b"),
    _rule("self-harm encouragement", ("self-harm", "harassment"),
          r"\b(?:go |you should |just |why don'?t you )(?:kill yourself|die|end your life|hang yourself)\b|\bkys\b"),
    _rule("self-harm promotion", ("self-harm",),
          r"\b(?:starv\w+|cutting|purging|self[- ]harm\w*|hurting|burning) (?:yourself |myself )?(?:is|isn'?t) (?:a |an |the |really |not a |no )?"
          r"(?:great|good|best|fine|healthy|normal|answer|only \w+|big deal)\b|\bpro[- ]?(?:ana|mia)\b"
          r"|\byou should (?:try )?(?:cutting|starving|hurting) (?:yourself)?"),
    _rule("self-harm acts", ("self-harm/intent",),
          r"\b(?:i'?m |i am )?(?:taking|take|swallow(?:ing)?) all (?:the|my|of my) (?:pills|tablets|meds|medication|sleeping pills)\b"
          r"|\bgoodbye (?:letters?|notes?) to (?:everyone|my family)\b|\b(?:write|writing|wrote|draft) (?:me |my )?(?:a |my )?suicide note\b"),
    _rule("self-harm means", ("self-harm/instructions",),
          r"\bi (?:wouldn'?t|won'?t|would not|will not|couldn'?t) survive (?:the|a) (?:fall|jump|drop)\b"
          r"|\b(?:high|tall) enough (?:that |so )?(?:i|you) (?:wouldn'?t|won'?t|would not|will not) survive\b"),
    _rule("eating disorder", ("self-harm",),
          r"\b(?:starve (?:myself|yourself)|make (?:myself|yourself) (?:throw up|vomit|sick) (?:to|after|so)|develop (?:anorexia|bulimia"
          r"|an eating disorder)|hide (?:my|an) eating disorder|(?:dangerously|extremely) low[- ]calorie|purge after (?:eating|meals))\b"),
    _rule("self-harm mention", ("self-harm",),
          r"\b(?:suicid\w*|self[- ]?harm\w*|self[- ]?injur\w*|overdos\w*)\b", MENTION),
    # ---------------------------------------------------------------- threats and harassment
    _rule("threat", ("harassment/threatening", "violence"),
          r"\b" + I_WILL + r" (?:\w+ )?(?:" + HURT + r" " + PEOPLE + r"|(?:beat|rough|mess|smash) " + PEOPLE + r" up)\b"
          r"|\bi (?:will|'?ll) (?:break|snap|smash) your (?:legs|arms|neck|face|jaw|teeth|skull)\b"),
    _rule("threat phrase", ("harassment/threatening",),
          r"\b(?:i know where you (?:live|work|sleep)|watch your back|you(?:'re| are) (?:so )?dead(?: meat)?\b|you(?:'re| are) "
          r"going to (?:die|regret|pay|suffer)|you'?ll (?:regret|pay for|be sorry)|i(?:'ll| will) (?:find|get|hunt) you"
          r"|sleep with one eye open|you won'?t (?:live|survive|see) (?:to see |)(?:tomorrow|another day|the weekend)"
          r"|nobody (?:will|'?ll|is going to) (?:ever )?find (?:your|the|his|her) body|something (?:bad|terrible|awful)"
          r" (?:is going to|will|'?s gonna|is gonna) happen to (?:you|your))"),
    _rule("threat request", ("harassment/threatening",),
          r"\b" + REQUEST + r"(?:\W+\w+){0,4}?\W+(?:threaten|intimidate|terrori[sz]e|blackmail|scare) (?:someone|somebody|people"
          r"|a person|him|her|them|my \w+)|\bintimidating (?:messages?|letters?|texts?|notes?)\b|\bbomb threat\b"
          r"|\b(?:ransom (?:letter|note|demand)|demanding (?:a )?ransom)\b|\bmost dangerous threat\b"),
    _rule("harassment request", ("harassment",),
          r"\b" + REQUEST + r"(?:\W+\w+){0,4}?\W+(?:bully|harass|humiliate|shame|troll|cyberbully|stalk|torment) (?:someone|somebody"
          r"|people|a person|him|her|them|my \w+|\w+ online|an? \w+)\b|\bspread(?:ing)? (?:rumou?rs|lies|embarrassing \w+)"
          r" about\b|\bmake (?:him|her|them|someone|somebody|people) feel (?:bad|worthless|stupid|ugly)\b"
          r"|\bdemeaning (?:meme|post|joke|comment)s?\b|\b(?:workplace bullying|online harassment|cyberstalk\w*)\b",
          unless=DEFENSIVE),
    _rule("insult", ("harassment",),
          r"\b(?:you(?:'re| are)|ur|u r|you) (?:such |a |an |so |the |just |really |fucking |fuckin )*(?:stupid|worthless|pathetic"
          r"|idiot|moron|loser|disgusting|ugly|useless|dumb|brainless|piece of (?:shit|garbage|trash)|waste of (?:space|air)"
          r"|failure|freak|pig|trash|garbage|clown|imbecile|retard\w*)\b"
          r"|\b(?:nobody|no one) (?:likes|loves|wants|cares about) you\b|\beveryone hates you\b"),
    # ---------------------------------------------------------------- violence
    _rule("violence how-to", ("violence", "illicit/violent"),
          HOW + r" (?:kill|murder|poison|strangle|stab|torture|kidnap|drown|suffocate|assassinate|maim|attack|hurt|beat up"
          r"|assault|ambush|injure|kick|punch)"
          r" (?:a |an |my |your |his |her |the |someone|somebody|people|person|him|her|them|a person)",
          unless=PESTS),
    _rule("violence plan", ("violence", "illicit/violent"),
          r"\b(?:plan(?:ning)?|carry(?:ing)? out|commit(?:ting)?|join(?:ing)?|fund(?:ing)?) (?:a |an |the )?(?:\w+ )?terror(?:ist)?"
          r" (?:attack|organi[sz]ation|group|cell|plot)\b|\b(?:plant(?:ing)?|detonat\w+|set(?:ting)? off) (?:a |the )?(?:\w+ )?bomb\b"
          r"|\b(?:incite|plan|organi[sz]e|start) (?:a )?(?:violent (?:protest|riot|attack)|violence|riot)\b"
          r"|\b(?:step-by-step )?plan to (?:ambush|attack|kill|kidnap|hurt) (?:someone|somebody|him|her|them|my \w+|a \w+)\b"),
    _rule("violence act", ("violence",),
          r"\b(?:shoot up|bomb|attack|blow up) (?:a|the|my|our|this) (?:\w+ )?(?:school|mall|church|mosque|synagogue|temple|office"
          r"|concert|stadium|crowd|hospital|subway|train|parade|class|hall|building|cent(?:re|er)|station|airport)\b|\bmass (?:shooting|murder|stabbing) (?:at|in|plan)"
          r"|\bbeat (?:him|her|them|someone|somebody|my \w+) (?:to death|senseless|bloody|unconscious)\b"
          r"|\b(?:torture|torturing|hurt|hurting|kill|killing) (?:animals|a cat|a dog|cats|dogs|puppies|kittens)\b for fun"
          r"|\b(?:deserves?|deserved) to (?:die|be (?:shot|killed|beaten|hanged|stabbed))\b"
          r"|\bput a bullet (?:in|through) (?:him|her|them|his|her|their|your|\w+'s)\b"
          r"|\b(?:then |and |, )(?:kill|murder|stab|shoot|strangle|execute|behead) (?:him|her|them|everyone|everybody|all of them"
          r"|the (?:witness|witnesses|prisoners?|hostages?|guards?|kids|children|family))\b"
          r"|\b(?:execute|behead|hang) (?:the|all the|those) (?:prisoners|hostages|captives|witnesses)\b"
          r"|\bi (?:could|would|will|'?ll|'?d|want to|wanna|am going to|'?m going to|'?m gonna) (?:\w+ )?(?:kill|murder|stab|shoot)"
          r" (?:a |an |some )?" + _PEOPLE_NOUN + r"s?\b"
          r"|\bpoison (?:the |my |his |her |their |your |someone'?s )?(?:\w+'?s )?(?:coffee|tea|drink|food|water|dinner|meal|wine)\b"
          r"|\blet'?s (?:go )?(?:hurt|beat up|attack|kill|stab|jump|rob) (?:some|a|the|that|those|him|her|them)\b"
          r"|\b(?:beaten |beat (?:\w+ ){1,2})(?:until|till) (?:he|she|they) (?:stops?|can'?t|doesn'?t|don'?t)\b"
          r"|\bheadshot (?:him|her|them)\b|\bburn (?:you|him|her|them|\w+) (?:alive|to death)\b"
          r"|\bburn (?:your|his|her|their) (?:house|home|car) down\b"),
    _rule("violence graphic", ("violence/graphic",),
          r"\b(?:entrails|intestines|guts|innards|brains?|brain matter|viscera)\b (?:\w+ ){0,3}(?:spill\w*|splatter\w*|hanging"
          r"|oozing|everywhere|spray\w*|leak\w*|sprayed)|\b(?:blood|gore) (?:\w+ )?(?:spurt\w*|gush\w*|spray\w*|pool\w*"
          r"|splatter\w*|pour\w*|everywhere)\b|\b(?:disembowel\w*|dismember\w*|eviscerat\w*|flay\w*|gouged? out|skinned alive"
          r"|severed (?:head|limbs?|arms?|legs?|fingers?)|bones? (?:snapp\w+|crunch\w+|protrud\w+|sticking out)"
          r"|flesh (?:tearing|torn|ripped|melting|peeled)|ripped (?:his|her|their) (?:throat|face|guts) out"
          r"|(?:face|skin|flesh) (?:was |being |got )?(?:peeled|torn|ripped) off|(?:brutal|gory|graphic|gruesome|bloody)"
          r" (?:murder|killing|death|torture) scenes?|(?:injur\w+|wounds?|death|murder|killing)s? (?:graphically|in (?:graphic|gory"
          r"|gruesome) detail))\b"),
    _rule("violence mention", ("violence",),
          r"\b(?:kill\w*|murder\w*|stab\w*|shoot\w*|shot|massacre\w*|torture\w*|war|wars|bomb\w*|genocide|assault\w*)\b", MENTION),
    # ---------------------------------------------------------------- illicit
    _rule("drug synthesis", ("illicit",),
          r"\b(?:" + HOW + r" (?:make|cook|synthesi[sz]e|produce|brew|extract|grow) (?:some |my own |pure )?" + DRUG + r"\b"
          r"|(?:synthesi[sz]e|synthesis of|synthesizing|cook(?:ing)?|recipe for|precursors? (?:for|of)) " + DRUG + r"\b"
          r"|(?:buy|order|sell|get|score|ship|smuggle) (?:some )?" + _words(r"drugs", *DRUGS, r"weed", r"pills", r"oxy") + r""
          r" (?:online|on the dark ?web|without (?:a prescription|getting caught)|past customs|across the border)\b)"
          r"|\brecipes? for (?:making )?" + DRUG + r"\b|\b" + HOW + r" (?:make|cook|mix|brew) (?:my own |some |our own )?(?:\w+ )?drugs\b"),
    _rule("crime how-to", ("illicit",),
          HOW + r" (?:shoplift|launder (?:money|cash)|hack into|break into (?:a|an|my \w+'?s|someone'?s|the|his|her) (?:house|home"
          r"|car|apartment|flat|building|safe|account|phone|store|shop)|hotwire|forge (?:a |an )?(?:signature|document|check"
          r"|cheque|passport|prescription|id|will)|counterfeit|evade (?:taxes|the police)|steal (?:from|money|a car|cars"
          r"|someone|people|\w+ from)|pickpocket|scam|phish|embezzle|bribe|blackmail|extort|dox|stalk|spy on|cheat on my"
          r" taxes|fake an id|make (?:a )?fake (?:id|passport|money)|cover up (?:a|the) (?:crime|murder|body|evidence)"
          r"|skim credit cards|sneak \w+ past|bypass (?:a |the )?(?:breathalyzer|paywall"
          r" of|alarm|security camera)|jailbreak a \w+ to steal|clone a (?:credit card|sim)|buy a stolen|make counterfeit)\b"
          r"|\b(?:write|make|build|create|code) (?:me )?(?:a |some )?(?:ransomware|keylogger|credit card skimmer|phishing"
          r" (?:page|site|email|kit)|malware|botnet|trojan|virus that)\b|\b(?:stolen credit card (?:numbers|details)"
          r"|steal (?:someone'?s|a|her|his|their|my \w+'?s) (?:identity|password|credit card|car|wallet))\b"),
    _rule("illicit request", ("illicit",),
          r"\b" + REQUEST + r"(?:\W+\w+){0,5}?\W+(?:smuggl\w*|pirat(?:e|ing)|counterfeit\w*|launder\w*|dox\w*|d?dos attack|poach\w*"
          r"|traffick?\w*|identity theft|stolen (?:goods|cars?|credit cards?|property)|drug dealers?|black market|fake (?:bank"
          r" accounts?|ids?|passports?|identity|documents?)|forge\w* (?:a |an )?(?:\w+ )?(?:documents?|signatures?|ids?)"
          r"|bypass (?:the )?drm|torrent links?|spread (?:a )?(?:computer )?(?:virus|malware|ransomware)|illegal(?:ly)?\b"
          r"|without (?:getting|being) caught|undetected|without (?:leaving )?(?:a )?trace|without being traced"
          r"|sneak \w+(?: \w+)? (?:through|past) (?:\w+ )?(?:security|customs|the border)|scam\w*|fraudulent|phishing"
          r"|fake (?:charity|charities|giveaways?|invoices?|lottery|reviews?)|(?:get around|bypass|circumvent) (?:the )?(?:age"
          r" verification|paywall|parental controls|copy protection|drm))",
          unless=DEFENSIVE),
    _rule("tax evasion and theft", ("illicit",),
          r"\b(?:hid(?:e|ing)|hide) (?:\w+ )?(?:income|earnings|money|cash) (?:from|so) (?:the )?(?:tax|irs|hmrc|authorities)"
          r"|\b(?:tax office|taxman|irs|hmrc) (?:never )?(?:notices?|finds? out)\b|\bfrom the (?:till|register|cash register)"
          r" (?:at work )?without\b"),
    _rule("animal cruelty", ("violence", "illicit"),
          r"\b(?:mistreat\w*|abus\w+|torment\w*) (?:animals|a dog|dogs|a cat|cats|pets) for (?:fun|amusement|laughs)\b"
          r"|\b(?:set up|organi[sz]e|run|train \w+ for) (?:a |an )?(?:illegal )?(?:dog ?fights?|cock ?fights?|animal fights?)\b"),
    _rule("weapons", ("illicit/violent",),
          r"\b(?:" + HOW + r"|(?:recipe|instructions|blueprint|plans) (?:for|to make)) (?:make|build|assemble|3d[- ]print|"
          r"create|produce|mix|brew|get|buy|acquire|weaponi[sz]e)? ?" + WEAPON + r"\b"
          r"|\b(?:" + HOW + r"|(?:recipe|instructions|blueprint|plans) (?:for|to make)) (?:make|build|assemble|3d[- ]print)"
          r" (?:a |an )?(?:\w+ )?(?:gun|firearm|weapon|rifle|pistol)s?\b"
          r"|\b(?:buy|get) (?:a )?(?:gun|firearm|weapon)"
          r" (?:without (?:a )?(?:background check|license|licence|serial)|illegally|on the dark ?web)\b|\bpoison (?:my|her|his"
          r"|someone'?s) \w+ (?:without|so (?:that )?(?:it|no one)|undetect\w*)"),
    _rule("hitman", ("illicit/violent", "violence"), r"\b(?:hire|find|pay|get) (?:a )?(?:hitman|hit man|assassin|contract killer)\b"),
    # ---------------------------------------------------------------- hate
    _rule("hate dehumanising", ("hate",),
          r"\b(?:all |most |those |these |the )?" + GROUP + r" (?:are|r) (?:all |just |nothing but |a bunch of )?(?:vermin|animals"
          r"|subhuman|sub-human|parasites|rats|cockroaches|filth|inferior|a disease|a plague|scum|savages|trash|dogs|apes|monkeys"
          r"|evil|criminals|rapists|terrorists|the problem|ruining (?:this|our) country|not (?:real )?(?:human|people)|disgusting"
          r"|freaks|mentally ill|sick|perverts|degenerates|a cancer|a burden|diseased|vile|worthless)\b"
          r"|\bi (?:hate|despise|can'?t stand) (?:all |those |these |the )?" + GROUP + r"\b"
          r"|\b" + GROUP + r" (?:should|must|need to|ought to) (?:go back|be banned|not be allowed|leave|be kicked out|stay out)"
          r"|\bgo back to (?:your|their) (?:own )?country\b"
          r"|\b(?:teach|tell|give|list|show) (?:me )?(?:some |a few |the )?(?:offensive |racial |racist |ethnic )?slurs\b"
          r"|\b(?:promot\w+|support\w*|justify\w*) (?:racial|religious|ethnic) (?:discrimination|intolerance|hatred|superiority)\b"
          r"|\b(?:those|these|such) (?:people|\w+s) (?:breed like|are like) (?:rats|cockroaches|animals|vermin|insects|rabbits)\b"
          r"|\bpeople like (?:them|that) are (?:a |an )?(?:disease|plague|cancer|vermin|parasites|animals|filth)\b"),
    _rule("hate threatening", ("hate/threatening",),
          r"\b(?:we should|we must|we need to|let'?s|i want to|i will|i'?ll|time to|someone should|it'?s time to) (?:\w+ )?"
          r"(?:kill|exterminate|gas|wipe out|get rid of|eradicate|slaughter|lynch|burn|shoot) (?:all |every )?(?:the |those |these )?"
          + GROUP + r"\b|\bdeath to (?:all )?(?:the )?" + GROUP + r"\b|\bkill all (?:the )?" + GROUP + r"\b"
          r"|\b" + GROUP + r" (?:should|must|need to|deserve to) (?:all )?(?:die|be killed|be exterminated|be gassed|be wiped out"
          r"|be shot|burn|be hanged|be eradicated)\b"),
    # ---------------------------------------------------------------- sexual
    _rule("sexual explicit", ("sexual",),
          r"\b(?:porn|porno|pornographic|xxx|nudes|nude (?:pics|photos|selfies)|blowjobs?|handjobs?|cumshots?|orgasm\w*"
          r"|masturbat\w*|erotic (?:story|roleplay|role-play|scene|fiction|chat)|sex scene|sexting|dick pics?|horny|naked (?:pics"
          r"|photos|pictures|selfies)|send (?:me )?(?:nudes|naked)|hook ?up tonight|escort service|sexual roleplay|make me cum"
          r"|dirty talk|talk dirty|strip (?:for me|naked)|get (?:me )?(?:off|aroused))\b"
          r"|\b(?:describe|write|tell) (?:me )?(?:a |an |some )?(?:\w+ )?(?:sex|sexual|steamy|explicit|erotic|x-rated|nsfw)"
          r" (?:\w+ )?(?:story|scene|encounter|fantasy|act|details)\b|\bhave sex with (?:me|you|her|him)\b"
          r"|\b(?:sexually explicit|explicit (?:sexual|sex|adult)|explicit (?:scenes?|content|materials?) (?:from|of|in) (?:\w+ )?(?:adult"
          r"|porn\w*|sex)|sexuali[sz](?:e|es|ed|ing) (?!of\b)\w+|sexual (?:positions?|fantas(?:y|ies)|intimacy|acts?) (?:using|in)"
          r" (?:explicit|graphic|detail)|(?:describe|discuss|explain|write|tell|detail)(?: \w+){0,3} sexual (?:acts?|positions?"
          r"|fantas(?:y|ies)|intimacy)|(?:do to me|with me) in bed|undress(?:ing)? (?:slowly )?for me)\b"),
    _rule("sexual minors keywords", ("sexual/minors", "sexual"),
          r"\b(?:child porn\w*|kiddie porn|csam|child sexual abuse material|lolicon|shotacon|jailbait|pedo(?:phile)? "
          r"(?:content|pics|videos|material)|underage (?:sex|nudes|porn|girls naked|boys naked)|preteen (?:nudes?|sex|porn))\b"),
)

# Minor and sexual words within a few words of each other, in either order (outside a safeguarding context).
MINOR_SEXUAL = re.compile(
    r"\b" + MINOR + r"\b(?:\W+\w+){0,6}?\W+" + SEXUAL + r"\b|\b" + SEXUAL + r"\b(?:\W+\w+){0,6}?\W+" + MINOR + r"\b"
)


def match(text: str) -> dict[str, float]:
    """Category → score of every rule that hits ``text`` (already ``neutralised``); deterministic."""
    hits: dict[str, float] = {}

    def hit(categories: tuple[str, ...], score: float) -> None:
        for c in categories:
            hits[c] = max(hits.get(c, 0.0), score)

    for rule in RULES:
        if rule.hits(text):
            hit(rule.categories, rule.score)
    if MINOR_SEXUAL.search(text):
        hit(("sexual/minors", "sexual"), MENTION if _safeguarding(text) else HIT)
    return hits


def _safeguarding(text: str) -> bool:
    return bool(SAFEGUARDING.search(text)) and not CONTENT_REQUEST.search(text)


def matched(text: str) -> list[str]:
    """The names of the rules that hit ``text`` (``neutralised``): why a text scored, for tests and the bench."""
    names = [rule.name for rule in RULES if rule.hits(text)]
    if MINOR_SEXUAL.search(text):
        names.append("sexual minors combination" + (" (safeguarding: under threshold)" if _safeguarding(text) else ""))
    return names


def neutralise(text: str) -> str:
    """``text`` normalised, with benign idioms cut out (what the rules and the SVM read)."""
    return BENIGN.sub(" ", normalise(text))
