"""Third-party kernels the course's kernels are compared with, on the same weights: Marlin (W4A16; lessons 07, 10, 11
and 12) and bitsandbytes (NF4; lessons 08 and 11). Each module finds its code, builds or imports it, and binds it to
the problem it solves."""
