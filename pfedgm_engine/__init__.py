"""An engine for the pFedGM app, not part of it: `inprocess` runs the app's ServerApp and
ClientApps in one process, as Flower's simulation engine does without Ray. An engine needs
names of Flower's runtime that its public API does not export (`tests/test_public_api.py`
pins them; docs/upstream/inprocess-engine.md proposes the public way); the app itself,
`pfedgm_app`, uses the public API only, and no FAB carries this package."""
