"""The values of pFedGM's switches, standard library only: the paper's ablations and the
readings of Phase 1 it leaves open (RESULTS.md). Each is explained where the code makes the
choice (`gaussian`, `phases`, `strategies.pfedgm`); the run-config check (`method_settings`)
reads them here without importing torch or flwr. The default is the first value of a
reading and the last of an ablation (pFedGM itself).
"""

OBJECTIVE_SCALES = ("mean", "sum")  # R_c's and zeta's 1/d (gaussian.personalized_objective)
PROTOTYPE_STEPS = ("epoch", "batch", "none")  # upsilon's step size (gaussian.update_prototypes_)
DECOUPLINGS = ("gm", "gm-c", "gm-d")  # the decoupling ablation (phases.train_round)
ADAPTATIONS = ("none", "finetune", "finetune-lbfgs")  # the adaptation ablation (phases)
HEAD_DECAY = ("mu", "b", "A")  # what weight decay may reach in the head (phases.train_round)
RC_INPUTS = ("before-dropout", "after-dropout")  # where R_c reads z (phases.train_round)
COVARIANCE_AVERAGES = ("precision", "covariance")  # A's average (strategies.pfedgm)
BIAS_AVERAGES = ("arithmetic", "mixture")  # b's average (strategies.pfedgm)
LBFGS_LINE_SEARCHES = ("none", "strong-wolfe")  # L-BFGS's steps (adaptation.refine_biases_)
