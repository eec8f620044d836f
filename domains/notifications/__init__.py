"""Notifications: people subscribe to what happens to their domains and hear of it in the
portal (live), by e-mail or through a signed webhook. Driven by the audit trail: every
event recorded (after commit) is matched against the subscriptions, a beat pass adds the
warnings about time (a lease ending soon, maintenance ahead)."""
