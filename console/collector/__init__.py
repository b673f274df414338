"""Turns broker input (advisories, the $FI tap) into events in the event log."""
