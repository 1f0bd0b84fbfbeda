"""Clients that drive Lockgate: the interface, and the embedded implementation."""

from .base import CheckpointInfo, Client, CompileResult, JobEvent, JobInfo, RunResult

__all__ = ["CheckpointInfo", "Client", "CompileResult", "JobEvent", "JobInfo", "RunResult"]
