"""The matching and redaction engine: the failure catalog's loader, the log matcher behind `doctor explain`, its block prefilter, and the redactor."""
