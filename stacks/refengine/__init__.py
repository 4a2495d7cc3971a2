"""The reference engine (an OpenAI-compatible server of exactly known timing) and the known-overhead proxy:
the calibrated instruments that prove the harness measures right. Run as separate processes:
`python -m stacks.refengine.server` and `python -m stacks.refengine.proxy`."""
