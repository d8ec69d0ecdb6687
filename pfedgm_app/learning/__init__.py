"""The learning itself, torch only: the generators (phi), the one local training loop, and
pFedGM's math, each equation named where it is coded.

- `models`: the generators (phi) and the model that pairs one with a head
- `training`: the local training loop every method uses; device, threads, evaluation
- `gaussian`: Phase 1's math: the Gaussian head (psi = mu, b; nu = A), objectives H and R_c,
  the class prototypes upsilon
- `adaptation`: Phase 2's math: the personalized head of Eq. (LossC), its fine-tuning and the
  L-BFGS refinement of its biases
- `phases`: pFedGM's two phases on a client, for any generator and any data
- `phase_data`: the data the phases take (tensor pairs or re-iterable batches)
- `diagnostics`: what Phase 1 is doing, as numbers per round
"""
