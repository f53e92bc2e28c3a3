"""The patterns the suggestion rules read: kernel sequences (sequences: fusable chains, GEMM loops,
unfused attention), host-side stalls (hostside: syncs, pageable copies, data loading,
communication), and their per-rank bundle (find_all.find_patterns -> patterns.Patterns)."""
