"""Reading PyTorch profiler (Kineto) traces into the Trace model: the only way data enters tracekit."""
