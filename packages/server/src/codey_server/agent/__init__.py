"""The agent loop: a session's turn, its tools, the model providers.

- :mod:`.supervisor`: which sessions' turns run here, without I/O — starting, queueing,
  cancelling, claiming, sweeping and releasing, and which processes to stop, forward or list;
  :mod:`.service` carries its effects out (turn tasks, leases, the sweep loop), and holds the
  waits for approvals, answers and sub-agents, providers and histories.
- :mod:`.machine`: a turn as a state machine without I/O — its inputs, its effects, the pure
  ``step`` of a turn's value, and what both turns share; :mod:`.turn`: Codey's own turn (a
  package: its value, loop, calls, model call, compaction); :mod:`.acp`: a turn an external
  ACP agent runs; :mod:`.route`: a provider as a turn sees it. :mod:`.driver`: the one async
  driver both run on (effects carried out, results fed back, every step appended through
  ``Engine.submit``). :mod:`.ports`: what they need.
- :mod:`.tools`: one module per tool and their registry; :mod:`.approvals`: the policies the
  tools' approval rules are built from.
- The model path: :mod:`.models` (providers), :mod:`.wire` (request and stream formats),
  :mod:`.stream`, :mod:`.errors`; the conversation from items (:mod:`.conversation`,
  :mod:`.history`), the instructions, context windows and compaction.
"""
