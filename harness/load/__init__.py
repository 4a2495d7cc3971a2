"""The load a compare sends and what it watches while it sends it: the streaming clients, the closed- and open-loop
level drivers, prompts, the metric scraper, where processes ran, the GPU sampler, and the barrier and shards of
several load processes."""
