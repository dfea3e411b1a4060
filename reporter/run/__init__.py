"""Running a comparison: the pipeline (collect, then analyse), executors and the manifest."""
