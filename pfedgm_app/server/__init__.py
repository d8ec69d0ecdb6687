"""The ServerApp's experiment below its entry point (`server_app.py`).

- `federation`: who is in the federation (the `query` round before round 1)
- `rounds`: Phase 1's loop of the method's training rounds (`Rounds`)
- `experiment`: Phase 1 with its evaluations and checkpoints, then Phase 2's personalize round
"""
