"""RDP, profiles, CDP, composition and guard kernels, samplers' RDP."""
