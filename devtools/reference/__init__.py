"""The reference pages under docs/, written from the code that defines what they describe.

    python -m devtools.reference    # docs/run-config.md, methods.md, presets.md,
                                    # hyperparameters.md, privacy.md

- `run-config.md`: every key, its default, bound and meaning (the settings groups' fields,
  formatted by `devtools.reference.run_config_doc`);
- `methods.md`: the method registry's table (`pfedgm_app.methods.markdown_table`) and how to
  add a method;
- `presets.md`: the presets' table (`pfedgm_app.runconfig.presets.markdown_table`);
- `hyperparameters.md`: the paper's training hyperparameters as the keys' defaults, which
  docs/flower-baseline.md shows;
- `privacy.md`: what leaves a device, from the replies the real ClientApp handlers send (every
  method in process, two MNIST clients, two rounds: a few seconds; needs the local MNIST copy,
  `--data`).

The first four need only the registries (`registry_pages`), the last a run of every method
(`privacy`); `__main__` writes them all. Tests regenerate the pages in memory and compare them
with the files (`tests/test_docs.py`; the privacy page in `tests/test_deploy_security.py`): a
change to a method, a key or a preset that is not regenerated fails there with this command in
the message. A helper of the repository, not part of the app.
"""

COMMAND = "python -m devtools.reference"
GENERATED = f"<!-- Written by `{COMMAND}` from the code; edit the code and run it again. -->"
