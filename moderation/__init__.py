"""Moderation: scores per category for chat text, what each tier blocks, personal data and prompt injection.

Where things are::

    categories.py   OpenAI's thirteen categories; Llama Guard 3's hazard codes mapped onto them
    classifier.py   Scores (one text's scores) and the Classifier interface; classifier_from(settings)
    local.py        LocalClassifier: alt-profanity-check's SVM (harassment) + rules.py, in process, no download
    rules.py        the regular expressions for what the SVM cannot see, and the benign idioms they skip
    llama_guard.py  LlamaGuard: Llama Guard 3 on SGLang, through workers.sglang.SGLangClient
    policy.py       TierPolicy / Policy: per tier, which categories block, at which scores, parallel or strict
    pii.py          PiiDetector: Presidio, find and redact personal data
    injection.py    detect: instructions aimed at the assistant inside retrieved text
    settings.py     ModerationSettings (PARLEY_MODERATION_*)

Pure logic: no Kafka, no Cassandra. bench/moderation.py measures quality on bench/moderation_set.py.
"""
