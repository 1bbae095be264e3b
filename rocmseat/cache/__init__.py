"""The cache room: the config key (`key`, `envclass`, `fingerprint`, `versions`, `current`) and
the cache store it governs (`store`, `layout`: one root per replica, a manifest, move-aside
under a lock), with its audit and prune (`audit`, `prune`, `usage`). docs/cache.md."""
