"""layerbench harness: load profile, prompts, streaming client, runner, scraper, stats, results, CLI.

Never imports vllm, ray or tritonserver: servers run as separate processes, as users run them.
"""

__version__ = "0.1.0"
