"""Training: a job validated once (setup), its step on the busiest chip (step), the estimate
(step time, memory, cost, MFU), pipeline schedules, and published runs predicted."""
