"""The measured truth about gradient filtering: what each filter keeps and what it costs."""
