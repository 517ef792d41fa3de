"""Moving a session to another machine ("Move to…", issue 38 §3): the orchestration
(:mod:`.service`), its pure decisions (:mod:`.decide`), its route (:mod:`.routes`)."""
