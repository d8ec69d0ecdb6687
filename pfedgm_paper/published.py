"""The paper's published numbers, for printing ours beside the paper's.

Source: the pFedGM paper's tables, by LaTeX label: `tab:standard` ("standard"),
`tab:corruption` ("corruption"), `tab:generalize` ("generalization"), `tab:client`
("moderate"), `tab:Time` ("runtime"), `tab:adaptation` ("adaptation") and `tab:decope`
("decoupling"). An underline or bold face in the paper marks the best and second best; it is
not data and is not kept.

`PUBLISHED[table][row][column] = (mean, std)`: accuracy in percent, mean over clients and the
std across clients, as the paper prints them (the std with two significant digits); `std` is
None where the paper gives none (adaptation, runtime). Runtime values are minutes.

Rows are the app's method names (`local`, `fedavg`, ..., `pfedgm`), except for adaptation
(`na`, `fa`, `ga`: no adaptation, fine-tuning, granular adaptation) and decoupling (`gm`: no
decoupling, `gm-c`: decoupling without the statistic extractor, `gm-d`: pFedGM). Columns are the
app's preset names (`pfedgm_app.runconfig.presets.PRESETS`), except for generalization, whose
columns are the client types of a run's `accuracy_by_type`.
"""

from __future__ import annotations

Cell = tuple[float, float | None]
Table = dict[str, dict[str, Cell]]

STANDARD = [
    f"{d}-{a}"
    for d in ("emnist", "cifar10", "cifar100", "tinyimagenet")
    for a in ("dir01", "dir05")
]
CORRUPTION = [
    f"{d}s-{a}-{c}"
    for d in ("cifar10", "cifar100")
    for a in ("dir01", "dir05")
    for c in ("50c", "100c")
]
MODERATE = [f"moderate-{c}" for c in STANDARD]
# Decoupling: the paper's columns are CIFAR-10S/100S Dir(0.1)/(0.5); its G.M. + D. row equals
# pFedGM's 100C values of the corruption table, so these are the 100C presets.
DECOUPLING = [c for c in CORRUPTION if c.endswith("-100c")]
# fmt: off
# Generalization: the paper's method columns; its "FedBAU" is FedBABU.
GENERALIZATION_METHODS = ["fedavg", "fedavgft", "fedbabu", "pfedme", "lgfedavg", "fedpac",
                          "pfedfda", "pfedgm"]
# fmt: on


def _table(columns: list[str], rows: dict[str, list[tuple[float, float]]]) -> Table:
    """`{row: {column: (mean, std)}}` from rows of (mean, std) in the order of `columns`."""
    return {
        row: {c: (float(m), float(s)) for c, (m, s) in zip(columns, cells, strict=True)}
        for row, cells in rows.items()
    }


def _means(columns: list[str], rows: dict[str, list[float]]) -> Table:
    """`{row: {column: (mean, None)}}` from rows of means in the order of `columns`."""
    return {
        row: {c: (float(m), None) for c, m in zip(columns, cells, strict=True)}
        for row, cells in rows.items()
    }


def _transpose(table: Table) -> Table:
    """`{column: {row: cell}}` from `{row: {column: cell}}`."""
    columns = next(iter(table.values()))
    return {c: {row: cells[c] for row, cells in table.items()} for c in columns}


# fmt: off
PUBLISHED: dict[str, Table] = {
    "standard": _table(STANDARD, {
        "local": [(86.56, 12), (71.00, 11), (86.43, 13), (58.64, 13),
                  (36.61, 8.9), (15.13, 4.8), (25.48, 7.0), (7.07, 2.7)],
        "fedavg": [(82.51, 13), (83.61, 8.2), (53.13, 11), (61.53, 6.7),
                   (23.79, 5.4), (24.59, 4.3), (21.37, 4.2), (19.54, 3.0)],
        "fedavgft": [(95.02, 5.3), (88.73, 5.6), (89.46, 10), (74.13, 8.5),
                     (49.47, 8.5), (30.13, 4.5), (41.15, 6.1), (21.41, 3.1)],
        "ditto": [(94.71, 5.9), (88.53, 5.7), (89.60, 10), (73.60, 8.2),
                  (49.54, 8.6), (30.12, 4.9), (42.30, 5.9), (23.29, 3.4)],
        "fedbabu": [(91.43, 8.4), (82.85, 8.3), (87.63, 14), (72.50, 9.1),
                    (43.37, 8.4), (26.13, 5.2), (39.40, 5.6), (20.77, 3.0)],
        "fedpac": [(94.26, 6.1), (89.70, 5.9), (89.59, 11), (76.29, 8.3),
                   (53.14, 7.0), (36.76, 5.5), (46.12, 5.6), (27.69, 3.6)],
        "fedrep": [(91.30, 7.6), (80.99, 7.9), (87.61, 12), (65.62, 10),
                   (38.81, 8.5), (17.55, 4.2), (26.05, 6.2), (11.69, 2.4)],
        "lgfedavg": [(93.53, 6.3), (83.96, 6.9), (88.35, 11), (64.39, 10),
                     (37.84, 8.7), (16.93, 4.4), (30.31, 6.2), (13.36, 2.4)],
        "fedper": [(93.39, 6.5), (83.93, 7.0), (89.43, 9.9), (65.65, 9.9),
                   (39.19, 8.7), (16.79, 4.7), (30.20, 6.1), (13.46, 2.4)],
        "pfedme": [(93.75, 6.0), (87.83, 5.6), (87.76, 11), (70.54, 8.8),
                   (43.74, 8.4), (24.73, 4.7), (33.78, 5.4), (16.60, 2.8)],
        "pfedfda": [(95.55, 4.8), (90.06, 5.1), (90.01, 9.6), (76.05, 7.6),
                    (50.32, 7.5), (39.28, 4.9), (42.98, 6.1), (24.17, 3.8)],
        "pfedgm": [(95.59, 4.9), (90.44, 5.0), (91.00, 9.4), (77.49, 7.1),
                   (57.56, 7.3), (42.25, 5.8), (51.17, 5.6), (35.45, 3.7)],
    }),
    "corruption": _table(CORRUPTION, {
        "local": [(85.80, 14), (86.52, 13), (57.82, 13), (56.83, 13),
                  (36.04, 9.8), (35.51, 10), (14.13, 4.7), (14.07, 4.7)],
        "fedavg": [(51.91, 13), (50.34, 14), (57.86, 10), (55.63, 10),
                   (21.39, 6.9), (19.85, 6.5), (23.43, 5.3), (20.99, 6.0)],
        "fedavgft": [(89.67, 10), (89.63, 9.5), (72.38, 8.2), (71.47, 9.6),
                     (48.51, 8.3), (46.99, 7.9), (29.42, 5.4), (27.90, 5.5)],
        "ditto": [(88.67, 11), (89.15, 9.9), (72.01, 8.5), (70.59, 9.2),
                  (48.11, 8.5), (47.90, 8.6), (30.22, 5.6), (28.73, 5.9)],
        "fedbabu": [(87.00, 14), (86.70, 13), (69.67, 12), (68.17, 10),
                    (41.05, 11), (35.14, 10), (24.21, 5.3), (23.19, 5.5)],
        "fedrep": [(86.91, 12), (86.86, 12), (63.47, 11), (63.13, 11),
                   (37.97, 9.0), (37.40, 9.4), (15.36, 4.1), (14.92, 4.4)],
        "fedpac": [(89.76, 10), (89.48, 10), (74.70, 8.5), (73.03, 8.8),
                   (51.63, 8.0), (50.79, 8.7), (34.93, 6.2), (32.01, 6.1)],
        "lgfedavg": [(88.59, 11), (88.15, 11), (64.43, 10), (64.30, 11),
                     (38.06, 9.1), (37.08, 8.9), (16.55, 4.5), (16.23, 5.1)],
        "fedper": [(88.60, 11), (88.51, 10), (64.51, 10), (63.81, 11),
                   (39.79, 8.7), (39.76, 8.8), (16.91, 4.9), (16.97, 4.8)],
        "pfedme": [(87.52, 12), (86.93, 13), (67.59, 9.2), (66.06, 9.8),
                   (43.67, 8.8), (43.01, 8.6), (24.49, 4.8), (24.05, 5.2)],
        "pfedfda": [(89.38, 9.8), (89.44, 10), (74.07, 9.0), (71.98, 8.9),
                    (49.18, 7.9), (46.81, 8.9), (37.79, 6.7), (33.69, 7.5)],
        "pfedgm": [(90.49, 9.3), (89.67, 9.5), (76.33, 8.2), (74.26, 8.4),
                   (56.25, 8.3), (53.72, 8.3), (39.05, 6.5), (36.58, 6.6)],
    }),
    # As the paper prints it: one row per client type, one column per method (then transposed).
    # The paper's row names -> the app's client types (`data.roles.client_type`, the corruption
    # names of `data.corruptions.CORRUPTIONS`): Original Clients -> original, motion ->
    # motion_blur, defocus -> defocus_blur, gaussian -> gaussian_noise, shot -> shot_noise,
    # impulse -> impulse_noise, jpeg -> jpeg_compression; clean, frost, fog, brightness,
    # contrast as they are.
    "generalization": _transpose(_table(GENERALIZATION_METHODS, {
        "original": [(57.64, 7.8), (72.38, 8.4), (69.18, 9.5), (68.25, 9.0),
                     (63.25, 11), (73.70, 8.7), (73.96, 8.6), (74.80, 7.3)],
        "clean": [(59.18, 3.9), (72.31, 9.2), (61.87, 19), (67.25, 12),
                  (63.77, 17), (72.15, 10), (72.94, 11), (72.94, 13)],
        "motion_blur": [(49.08, 9.9), (68.62, 9.7), (62.31, 10), (64.92, 8.1),
                        (58.00, 8.3), (70.31, 7.1), (68.31, 6.4), (70.92, 5.7)],
        "defocus_blur": [(59.80, 6.0), (74.62, 8.5), (69.34, 4.3), (69.34, 8.6),
                         (64.74, 10), (74.28, 9.0), (72.74, 9.5), (75.30, 6.3)],
        "gaussian_noise": [(57.44, 6.9), (69.12, 12), (68.80, 12), (68.16, 13),
                           (62.88, 14), (73.76, 12), (72.00, 12), (74.72, 8.9)],
        "shot_noise": [(57.48, 3.5), (67.44, 9.0), (50.66, 20), (66.94, 6.8),
                       (59.97, 9.3), (72.43, 7.7), (70.60, 5.4), (72.26, 6.1)],
        "impulse_noise": [(53.76, 6.9), (68.18, 11), (60.50, 14), (66.61, 9.3),
                          (59.25, 9.1), (70.85, 9.7), (70.85, 10), (73.20, 9.9)],
        "frost": [(41.23, 10), (61.05, 9.1), (56.26, 8.3), (59.91, 11),
                  (47.61, 7.3), (58.09, 12), (58.54, 8.6), (61.50, 11)],
        "fog": [(45.20, 14), (69.54, 7.6), (69.37, 5.8), (69.87, 8.0),
                (65.23, 10), (70.53, 9.6), (71.52, 8.4), (71.36, 8.2)],
        "jpeg_compression": [(57.53, 7.2), (67.43, 7.6), (66.21, 8.9), (66.82, 7.2),
                             (60.58, 7.9), (71.23, 5.7), (70.93, 8.2), (74.89, 8.1)],
        "brightness": [(47.82, 8.6), (76.64, 8.6), (74.45, 9.2), (72.90, 10),
                       (66.82, 12), (75.55, 8.5), (77.41, 7.4), (78.66, 5.8)],
        "contrast": [(32.76, 14), (66.21, 15), (63.48, 19), (67.41, 13),
                     (59.22, 18), (65.36, 17), (67.58, 17), (69.62, 14)],
    })),
    "moderate": _table(MODERATE, {
        "local": [(91.50, 8.8), (81.71, 7.7), (90.28, 12), (68.19, 9.2),
                  (47.75, 4.7), (25.95, 4.2), (36.70, 4.0), (16.42, 1.6)],
        "fedavg": [(83.18, 14), (85.25, 7.9), (55.60, 13), (68.25, 5.8),
                   (31.28, 6.0), (35.15, 2.8), (27.91, 4.3), (29.56, 1.7)],
        "fedavgft": [(96.16, 4.7), (90.79, 4.8), (91.87, 8.3), (79.14, 6.3),
                     (58.46, 3.9), (43.44, 2.9), (50.13, 3.1), (36.57, 1.6)],
        "fedpac": [(96.03, 4.5), (90.74, 4.8), (92.08, 9.2), (79.32, 6.2),
                   (59.51, 4.5), (44.87, 3.4), (52.34, 2.2), (36.21, 1.8)],
        "pfedfda": [(96.43, 4.3), (91.45, 4.6), (91.84, 8.1), (79.65, 6.5),
                    (57.10, 4.2), (47.60, 2.8), (47.36, 3.3), (37.15, 1.6)],
        "pfedgm": [(96.55, 4.1), (91.82, 4.5), (92.48, 7.9), (80.93, 5.5),
                   (63.79, 4.4), (51.04, 2.9), (54.38, 2.9), (42.35, 1.7)],
    }),
    # Minutes, in the paper's order of methods (Local and FedAvgFT are not tabled).
    "runtime": _transpose(_means(
        ["fedavg", "ditto", "fedper", "fedrep", "fedbabu", "pfedme", "lgfedavg", "fedpac",
         "pfedfda", "pfedgm"],
        {"cifar10-dir05": [64.91, 96.08, 61.94, 67.03, 62.34, 102.21, 62.68, 113.31, 164.62,
                           81.75],
         "cifar100-dir05": [65.85, 104.33, 68.25, 68.97, 63.99, 114.24, 61.22, 167.72, 172.15,
                            89.23]},
    )),
    # Means only; the paper's "Acc. Avg. (Improv. Rate)" column is not kept.
    "adaptation": _means(STANDARD + CORRUPTION, {
        "na": [80.86, 83.58, 55.32, 63.59, 25.32, 30.52, 23.52, 26.31,
               49.87, 47.13, 60.70, 57.33, 23.33, 19.71, 25.58, 22.38],
        "fa": [95.08, 90.12, 90.88, 77.02, 53.40, 41.44, 48.46, 34.72,
               90.25, 89.46, 76.00, 74.08, 51.78, 49.13, 37.90, 35.00],
        "ga": [95.59, 90.44, 91.00, 77.49, 57.56, 42.25, 51.17, 35.45,
               90.49, 89.67, 76.33, 74.26, 56.25, 53.72, 39.05, 36.58],
    }),
    "decoupling": _table(DECOUPLING, {
        "gm": [(89.32, 9.7), (73.92, 8.5), (52.46, 8.4), (36.15, 6.4)],
        "gm-c": [(89.63, 9.8), (74.02, 8.3), (51.65, 9.0), (36.01, 6.6)],
        "gm-d": [(89.67, 9.5), (74.26, 8.4), (53.72, 8.3), (36.58, 6.6)],
    }),
}
# fmt: on
