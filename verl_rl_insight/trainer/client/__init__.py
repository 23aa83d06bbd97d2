"""The trainer side's way to the server: metric batches, the sender that gets them there without
the training thread waiting, target announcements, the HTTP client and the server URL (which
carries the write token)."""
