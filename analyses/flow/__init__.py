"""Where information flows: rollout, exact flow (Abnar & Zuidema 2020), norm- and gradient-weighted variants."""
