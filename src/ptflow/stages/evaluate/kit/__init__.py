"""The evaluation kit: files copied as they are beside an agent's model (``run.write_agent_kit``); they import
inspect_ai and inspect_evals only, never ptflow."""
