"""`tritonize tune`: search the serving config (instances, threads, queue delay, preferred batch, client
concurrency) for the highest throughput within a p99 budget, on the server the user runs."""
