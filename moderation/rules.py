"""Phrase rules for what the bundled linear model cannot see (moderation/local.py).

alt-profanity-check's SVM knows offensive words; it does not know a threat
worded politely, self-harm intent, weapon or drug recipes, group hatred or
sexual content about minors. These regexes do, over normalised text (lower
case, punctuation to spaces). A hit scores its category and the category's
parent ``RULE_SCORE``; a few broad terms score below the default threshold on
purpose (``suicide`` alone appears in clinical and news text). Phrases that
only look violent ("kill the process", "shoot a photo", "this joke killed
me", "a killer feature") are removed before the rules and the model read the
text (``SAFE``). Deterministic; no model, no download.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from types import MappingProxyType

from moderation.categories import parent

#: What a rule hit scores (above any default threshold), and what a weak hint scores (below it).
RULE_SCORE = 0.9
HINT_SCORE = 0.35

_TARGET = r"(?:you|u|ya|your (?:family|kids|wife|husband)|him|her|them|everyone|everybody)"
_GROUPS = (
    r"(?:immigrants|muslims|jews|christians|hindus|blacks|whites|asians|gays|lesbians|trans people|women|mexicans|"
    r"arabs|refugees|foreigners)"
)
_MINORS = r"(?:child|children|kid|kids|minor|minors|underage|preteens?|toddlers?|schoolgirls?|schoolboys?|\d{1,2} year old)"
_SEXUAL = r"(?:nude|nudes|naked|porn|pornographic|erotic|sexual (?:images|photos|pictures|content|acts?|videos?)|sex with)"

#: Look-alikes removed before anything reads the text.
SAFE = re.compile(
    r"\b(?:"
    r"kill(?:s|ed|ing)?(?: -\d+| the| a| that| this| all| my| our)? (?:process(?:es)?|tasks?|jobs?|threads?|servers?|sessions?|"
    r"apps?|programs?|commands?|pids?|containers?|pods?|signals?|switch|bugs?|lights?|engine|music|time|the mood)|"
    r"kill -?\d+|pkill|killall|"
    r"(?:this|that|the|your) (?:joke|show|movie|set|line|meme)s? (?:killed|kills|is killing) me|(?:you re|you are) killing me|"
    r"killer (?:feature|app|deal|combo|idea|view|workout|look|song)s?|"
    r"murder (?:a |the )?(?:pizza|burger|sandwich|beer|steak)|"
    r"(?:shoot|shooting|shot|shoots) (?:a |the |some |my |our )?(?:photos?|pictures?|videos?|films?|scenes?|movies?|portraits?|"
    r"weddings?|hoops|baskets?|emails?|messages?|notes?|breeze|the moon)|"
    r"(?:execute|executes|executing|execution of|terminate|terminating|abort|aborting) (?:the |a |this |my )?(?:scripts?|programs?|"
    r"query|queries|threads?|process(?:es)?|plans?|orders?|jobs?|commands?|tasks?|trades?)|"
    r"dead ?(?:code|lock|line)s?|bomb(?:ed)? (?:the|my|an?) (?:exam|test|interview|audition)"
    r")\b"
)

#: (category, pattern, score): each pattern's hit scores its category and its parent.
RULES: tuple[tuple[str, re.Pattern[str], float], ...] = tuple(
    (category, re.compile(pattern), score)
    for category, pattern, score in (
        # threats against a person
        ("harassment/threatening", rf"\b(?:i m|i am|im|i ll|i will|we ll|we will|we re|we are)(?: going to| gonna)? (?:kill|murder|hurt|beat|stab|shoot|strangle|rape|find|get) {_TARGET}\b", RULE_SCORE),
        ("harassment/threatening", r"\b(?:you re|you are|ur) (?:going to|gonna) (?:die|pay|regret)\b|\bi know where you live\b|\bwatch your back\b", RULE_SCORE),
        ("violence", rf"\b(?:kill|murder|stab|shoot|behead|slaughter|massacre|torture|strangle) (?:{_TARGET}|people|the (?:man|woman|child|kids|family)|my (?:wife|husband|family|neighbou?r|boss|teacher))\b", RULE_SCORE),
        ("violence", r"\bburn (?:down )?(?:your|his|her|their) (?:house|home|car|school)\b|\bshoot up (?:a |the )?(?:school|church|mosque|synagogue|mall)\b", RULE_SCORE),
        ("violence/graphic", r"\b(?:dismember(?:ed|ing)?|disembowel(?:ed|ing)?|decapitat(?:e|ed|ing)|eviscerat(?:e|ed|ing))\b|\b(?:blood|guts|brains|entrails) (?:spilled|splattered|everywhere|pouring out)\b", RULE_SCORE),
        # self-harm
        ("self-harm/intent", r"\b(?:i (?:want|wanna|am going|m going|plan|intend|need)(?: to)?|i will|i ll|i m gonna) (?:kill myself|end (?:my life|it all)|die|hurt myself|cut myself|commit suicide|overdose)\b", RULE_SCORE),
        ("self-harm/intent", r"\b(?:i m|i am|im|feeling) suicidal\b|\bno reason to (?:live|go on)\b", RULE_SCORE),
        ("self-harm/instructions", r"\b(?:how (?:to|do i|can i|should i)|best way to|easiest way to|painless way to|quickest way to) (?:kill (?:myself|yourself)|commit suicide|end (?:my|your) life|overdose|cut (?:myself|yourself)|hang (?:myself|yourself)|slit (?:my|your) wrists)\b", RULE_SCORE),
        ("self-harm", r"\b(?:suicide|self harm)\b", HINT_SCORE),
        # hate
        ("hate", rf"\b(?:all|those|these|the|filthy|dirty) {_GROUPS} (?:are|should be) (?:animals|vermin|subhuman|scum|trash|parasites|rats|cockroaches|inferior)\b", RULE_SCORE),
        ("hate", rf"\bi hate (?:all )?{_GROUPS}\b", RULE_SCORE),
        ("hate/threatening", rf"\b(?:all |those |these |the )?{_GROUPS} (?:should|must|need to|deserve to) (?:be (?:killed|exterminated|gassed|shot|hanged|wiped out)|die)\b|\bdeath to (?:all )?{_GROUPS}\b|\bkill all {_GROUPS}\b", RULE_SCORE),
        # illicit
        ("illicit", r"\bhow (?:to|do i|can i|do you) (?:make|cook|synthesi[sz]e|produce|grow) (?:meth|methamphetamine|crack|heroin|fentanyl|lsd|mdma|cocaine)\b", RULE_SCORE),
        ("illicit", r"\b(?:how (?:to|do i|can i) )(?:launder money|steal (?:a car|credit cards?|someone s identity)|hack into (?:someone s|my ex s|a bank|an? email)|pick a lock to break in|make counterfeit (?:money|bills))\b|\bbuy (?:stolen|fake) (?:credit cards|passports|ids)\b", RULE_SCORE),
        ("illicit/violent", r"\b(?:how (?:to|do i|can i|do you)|instructions (?:to|for)|steps to) (?:make|build|assemble|create) (?:a |an )?(?:bomb|pipe bomb|explosive|explosives|ied|molotov cocktail|nerve agent|sarin|bioweapon|ghost gun|silencer)\b", RULE_SCORE),
        # sexual
        ("sexual", r"\b(?:porn|porno|pornographic|xxx|blowjob|handjob|orgasm|masturbat\w*|nudes|sexting|explicit sex|graphic sex|have sex with me)\b", RULE_SCORE),
        ("sexual/minors", rf"\b{_MINORS}\b(?:\W+\w+){{0,5}}?\W+{_SEXUAL}\b|\b{_SEXUAL}\b(?:\W+\w+){{0,5}}?\W+{_MINORS}\b|\b(?:child porn|csam|loli|lolicon|shotacon|jailbait)\b", RULE_SCORE),
    )
)


def normalise(text: str) -> str:
    """Lower case, accents off, punctuation and runs of space to one space (``don't`` → ``don t``)."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return " ".join(re.sub(r"[^a-z0-9]+", " ", folded).split())


def without_lookalikes(normalised: str) -> str:
    return SAFE.sub(" ", normalised)


def rule_scores(normalised: str) -> Mapping[str, float]:
    """Each category a rule hit in ``normalised`` text (safe look-alikes removed), with its parent."""
    found: dict[str, float] = {}
    for category, pattern, score in RULES:
        if pattern.search(normalised):
            for c in {category, parent(category)}:
                found[c] = max(found.get(c, 0.0), score)
    if "sexual/minors" in found:  # never weaker than its parent: the one category no policy should miss
        found["sexual"] = max(found.get("sexual", 0.0), found["sexual/minors"])
    return MappingProxyType(found)
