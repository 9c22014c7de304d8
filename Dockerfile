# The control plane image: web (gunicorn), Celery worker and beat share it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY client ./client
COPY pyproject.toml README.md ./
COPY controlplane ./controlplane
COPY limits ./limits
COPY api ./api
COPY gateway ./gateway
COPY migrations ./migrations
COPY templates ./templates
COPY manage.py gunicorn.conf.py ./
# collectstatic reads the settings, which refuse to load without a SECRET_KEY when DEBUG
# is off: a throw-away one for the build (the running containers get theirs).
RUN pip install --no-cache-dir ./client -e . && \
    SECRET_KEY=build-only-collectstatic python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["gunicorn", "controlplane.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4"]
