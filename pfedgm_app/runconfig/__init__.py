"""The run-config: every key a run reads, its bounds and the paper's defaults, parsed without
torch or flwr (so `pfedgm check` validates a run-config in a fraction of a second).

- `settings`: the machinery: a group of keys is a frozen dataclass of `Settings`; `ConfigError`
- `common`: the keys every method shares (`RunConfig`) and their checks across keys
- `method_settings`: each method's own keys, and the parse of a whole run-config
- `readings`: pFedGM's switches (the paper's ablations, the readings it leaves open) and the
  options objects that carry them into the phases
- `presets`: the paper's experiments as named presets (`preset`)
- `shared_data`: where the offline copies of the data live beside a checkout
  (`dataset='shared:<name>'`)
"""
