"""Circuits between heads: exact path patching, edge attribution (EAP, EAP-IG), circuit discovery and
checks against circuits whose edges are known (Wang et al. 2022; Syed et al. 2023; Hanna et al. 2024)."""
