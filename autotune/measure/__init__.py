"""What a measurement is, whichever engine takes it: the prompt mixes (`prompts`), one generation's and
one mix's figures (`measurement`: decode tok/s as llama-server defines it, acceptance...), the check
that greedy speculative output is the baseline's (`lossless`), the statistics over repeated
measurements (`stats`), and the lock that keeps two measurements off one device (`device_lock`).
"""
